"""`copy_async` through the tensor memory accelerator (sm_90a): which copies take it,
the PTX they become, the runtime's record of the tensor maps; on the GPU, the copies
against the interpreter."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from kernel_harness import PROGRAMS, load_module, require_sm90

from tilevm.backend.analysis.signature import Signature, TensorMapSpec, signature_from_program
from tilevm.backend.analysis.tma import tensor_maps, tma_ring_bound
from tilevm.backend.cuda import driver
from tilevm.backend.cuda import prepared as prepared_module
from tilevm.backend.cuda import tensor_maps as encoding
from tilevm.backend.cuda.buffers import BufferInfo
from tilevm.backend.cuda.validate import BoundPointer, BoundScalar
from tilevm.backend.launch import compiled_kernel
from tilevm.backend.pipeline import compile_program, run_passes
from tilevm.backend.ptxas import check_ptx
from tilevm.ir import instructions as ins
from tilevm.ir.transform import instructions

KERNELS = load_module(PROGRAMS / "tma_kernels.py")


def _copies(program) -> list[ins.Lowering]:
    return [i.lowering for i in instructions(program.body) if isinstance(i, ins.CopyAsync)]


def test_copies_of_a_launch_wide_view_take_tma_on_sm_90a_only():
    program = KERNELS.staged_copy.specialize()
    hopper = _copies(run_passes(program, arch="sm_90a"))
    assert hopper and all(f.name == "tma" for f in hopper)
    # [64, 64] f16 rows of 128 bytes, swizzled by 128 bytes: dims innermost first
    assert hopper[0] == ins.lowering("tma", dims="1,0", box="64,64", swizzle=128,
                                     bytes=64 * 64 * 2)
    assert all(f.name == "cp_async" for f in _copies(run_passes(program, arch="sm_80")))
    assert all(f.name == "cp_async" for f in _copies(run_passes(program)))


def test_a_view_that_moves_with_the_block_keeps_cp_async():
    program = KERNELS.staged_copy.specialize(per_block=True)
    assert all(f.name == "cp_async" for f in _copies(run_passes(program, arch="sm_90a")))


@pytest.mark.parametrize("kw, ring", [(dict(), 1), (dict(stages=3), 2),
                                      (dict(stages=4), 3), (dict(copy_first=True), None),
                                      (dict(drain=False), None)])
def test_tma_needs_a_pipeline_whose_groups_fit_a_ring_of_barriers(kw, ring):
    """The ring is the most groups pending after a commit; a copy issued while a thread
    may still be waiting on an older group (no barrier between) or a kernel that may end
    with copies in flight gets no ring, and its copies keep `cp.async`."""
    program = KERNELS.staged_copy.specialize(**kw)
    assert tma_ring_bound(program) == ring
    forms = {f.name for f in _copies(run_passes(program, arch="sm_90a"))}
    assert forms == ({"tma"} if ring else {"cp_async"})


@pytest.mark.parametrize("kw", [dict(copy_first=True), dict(drain=False)])
def test_the_pipelines_without_a_ring_still_copy_in_the_interpreter(kw):
    x = np.random.default_rng(1).standard_normal((70, 136)).astype(np.float16)
    y = np.full_like(x, np.nan)
    KERNELS.staged_copy.interpret(x, y, 70, 136, **kw)
    assert np.array_equal(y, x)


def test_a_64_byte_row_takes_the_64_byte_swizzle():
    forms = _copies(run_passes(KERNELS.staged_copy.specialize(bn=32), arch="sm_90a"))
    assert forms[0] == ins.lowering("tma", dims="1,0", box="32,64", swizzle=64,
                                    bytes=32 * 64 * 2)


@pytest.mark.parametrize("stages", [2, 3])
def test_the_ptx_has_map_parameters_a_barrier_ring_and_bulk_tensor_copies(stages):

    program = KERNELS.staged_copy.specialize(stages=stages)
    compiled = compile_program(program, "sm_90a")
    ptx = compiled.ptx
    # one map (one view, one box): a 128-byte, 64-byte aligned parameter after x, y, M, N
    assert len(re.findall(r"\.param \.align 64 \.b8 \w+_param_4\[128\]", ptx)) == 1
    assert "cvta.param" in ptx
    # the ring: stages - 1 barriers (the most groups a wait leaves pending, plus one)
    assert ptx.count("mbarrier.init.shared::cta.b64") == stages - 1
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx" \
        "::bytes" in ptx
    assert "mbarrier.expect_tx" in ptx and "mbarrier.try_wait.parity" in ptx
    assert "cp.async.cg" not in ptx and "cp.async.wait_group" not in ptx  # TMA only
    # the plan holds the ring past the tiles
    assert compiled.shared_bytes >= stages * 64 * 64 * 2 + 8 * (stages - 1)
    report = check_ptx(ptx, "sm_90a")[program.name]
    assert report.spill_stores == 0


def test_the_signature_records_the_maps_and_round_trips_through_json():
    program = KERNELS.staged_copy.specialize()
    lowered = run_passes(program, arch="sm_90a")
    maps = tensor_maps(lowered)
    assert maps == (TensorMapSpec("gx", (1, 0), (64, 64), 128),)
    sig = signature_from_program(program)
    assert [v.name for v in sig.views] == ["gx", "gy"]
    sig = replace(sig, tensor_maps=maps)
    again = Signature.from_json(json.loads(json.dumps(sig.to_json())))
    assert again.tensor_maps == maps and again.views == sig.views


class _FakeDriver:
    """Enough of `cuda.bindings.driver` for `encode_tensor_maps` to run without a GPU:
    the enums are their members' names, the encoding and allocation calls recorded."""

    CUresult = SimpleNamespace(CUDA_SUCCESS=0)

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name: str):
        return SimpleNamespace(**{m: m for m in (
            "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", "CU_TENSOR_MAP_SWIZZLE_128B",
            "CU_TENSOR_MAP_INTERLEAVE_NONE", "CU_TENSOR_MAP_L2_PROMOTION_L2_128B",
            "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE")})

    cuuint64_t = cuuint32_t = staticmethod(int)

    def cuTensorMapEncodeTiled(self, *args):
        self.calls.append(("encode", *args))
        return 0, f"map{len(self.calls)}"

    def cuMemAlloc(self, nbytes):
        self.calls.append(("alloc", nbytes))
        return 0, 0x7F0000

    def cuMemsetD8(self, address, value, nbytes):
        self.calls.append(("memset", address, value, nbytes))
        return (0,)


@pytest.mark.parametrize("K", [136, 0])
def test_an_empty_view_is_encoded_as_one_zero_element(monkeypatch, K):
    """The map of an empty view (no copy reads it: every box is zero fill) points at one
    element of a zeroed buffer, allocated once; a non-empty view maps its own memory."""

    fake = _FakeDriver()
    monkeypatch.setattr(driver, "bindings", lambda: fake)
    monkeypatch.setattr(driver, "ensure_context", lambda: driver.Context(7, 0))
    monkeypatch.setattr(encoding, "_zero_blocks", {})
    program = KERNELS.staged_copy.specialize()
    sig = replace(signature_from_program(program),
                  tensor_maps=tensor_maps(run_passes(program, arch="sm_90a")))
    x, y, M, N = sig.params
    bound = [BoundPointer(x, BufferInfo(0x10000, 70 * K * 2, "f2", "f16")),
             BoundPointer(y, BufferInfo(0x20000, 70 * K * 2, "f2", "f16")),
             BoundScalar(M, 70), BoundScalar(N, K)]
    for _ in range(2):
        assert encoding.encode_tensor_maps(sig, bound) == ["map" + str(len(fake.calls))]
    encodes = [c for c in fake.calls if c[0] == "encode"]
    # (dtype, rank, address, dims innermost first, byte strides, box, element strides, ...)
    if K:
        assert encodes[0][2:6] == (2, 0x10000, [K, 70], [2 * K])
        assert not [c for c in fake.calls if c[0] != "encode"]
    else:
        assert encodes[0][2:6] == (2, 0x7F0000, [1, 1], [16])
        assert [c for c in fake.calls if c[0] != "encode"] == [
            ("alloc", encoding.ZERO_BLOCK_BYTES), ("memset", 0x7F0000, 0,
                                                    encoding.ZERO_BLOCK_BYTES)]
    assert all(c[6] == [64, 64] for c in encodes)


@pytest.mark.parametrize("per_block", [False, True])
def test_the_test_kernel_copies_in_the_interpreter(per_block):
    M, N = 70, 136
    x = np.random.default_rng(1).standard_normal((M, N)).astype(np.float16)
    y = np.full((M, N), np.nan, np.float16)
    KERNELS.staged_copy.interpret(x, y, M, N, bm=32, bn=32, stages=3, per_block=per_block)
    assert np.array_equal(y, x)


@pytest.mark.gpu
@pytest.mark.parametrize("M, N, stages, bn", [(256, 512, 2, 64), (200, 328, 3, 64),
                                              (64, 40, 2, 32), (1, 8, 2, 64)])
def test_tma_copies_match_the_interpreter(M, N, stages, bn):
    from kernel_harness import run_both


    require_sm90("TMA")
    rng = np.random.default_rng(M * N)
    x = rng.standard_normal((M, N)).astype(np.float16)
    y = np.full((M, N), np.nan, np.float16)
    got, expected = run_both(KERNELS.staged_copy, [x, y, M, N], {"stages": stages, "bn": bn})
    assert np.array_equal(got[1].view(np.uint16), expected[1].view(np.uint16))
    assert np.array_equal(got[1], x)


@pytest.mark.gpu
def test_the_fast_path_launches_with_the_encoded_maps(monkeypatch):
    """Torch tensors take `_TorchFastPath`: its prepared launch encodes the maps for the
    first buffers and reuses them for the same buffers; new buffers are encoded anew."""
    torch = pytest.importorskip("torch")

    if not torch.cuda.is_available() or driver.device_arch() != "sm_90":
        pytest.skip("TMA needs sm_90a (Hopper) and PyTorch on CUDA")
    encoded = []
    encode = prepared_module.encode_tensor_maps
    monkeypatch.setattr(prepared_module, "encode_tensor_maps",
                        lambda sig, bound: encoded.append(1) or encode(sig, bound))
    kernel = compiled_kernel(KERNELS.staged_copy.specialize(), "sm_90a")
    M, N = 130, 200
    x = torch.randn(M, N, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    for _ in range(2):
        y.fill_(float("nan"))
        kernel(x, y, M, N)
        torch.cuda.synchronize()
        assert torch.equal(y, x)
    assert len(encoded) == 1 and kernel._fast is not None
    x2 = torch.randn(M, N, device="cuda", dtype=torch.float16)
    kernel(x2, y, M, N)
    torch.cuda.synchronize()
    assert torch.equal(y, x2) and len(encoded) == 2
