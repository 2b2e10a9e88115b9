"""The GPU backend: compiling to PTX that ptxas accepts (CPU), `vmc compile`, and compiled
kernels against the interpreter on random inputs (GPU, marked `gpu`)."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import (
    PROGRAMS,
    ROOT,
    compile_once,
    load_module,
    ptxas_report,
    run_both,
    vmc,
)

import tilevm as tv
from tilevm.backend import ptxas
from tilevm.backend.llvm.context import _broadcast_map
from tilevm.backend.passes.infer_layouts import default_layout
from tilevm.backend.pipeline import PASS_NAMES, run_passes
from tilevm.dtypes import parse
from tilevm.ir.errors import VMError
from tilevm.ir.transform import instructions
from tilevm.ir.types import MemorySpace
from tilevm.layouts import local, replicated, spatial
from tilevm.layouts.fragments import mma_m16n8k16_a, mma_m16n8k16_c

KERNELS = PROGRAMS / "backend_kernels.py"
ARCHES = ("sm_80", "sm_90")




kernels = load_module(KERNELS)
vector_add = load_module(ROOT / "examples" / "vector_add.py").vector_add
COMPILED = [(vector_add, {"block": 1024}), (vector_add, {"block": 256}),
            (kernels.scale_relu, {}), (kernels.tile_add_2d, {}), (kernels.dequant_int8, {}),
            (kernels.int_floor_div, {})]


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("kernel, constants", COMPILED, ids=lambda v: getattr(v, "name", str(v)))
def test_ptxas_accepts_without_spills(kernel, constants, arch):
    compiled = compile_once(kernel.specialize(**constants), arch)
    report = ptxas_report(compiled.ptx, arch)
    assert report[kernel.name].spill_bytes == 0
    assert f".target {arch}" in compiled.ptx and f".maxntid {compiled.num_threads}" in \
        compiled.ptx


def test_contiguous_tiles_use_16_byte_accesses():
    ptx = compile_once(vector_add.specialize(block=1024), "sm_90").ptx
    assert "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx
    # The row stride of tile_add_2d is the runtime N, not provably a multiple of 4
    # elements: its rows may start anywhere, so no 16-byte access may be formed.
    ptx = compile_once(kernels.tile_add_2d.specialize(), "sm_90").ptx
    assert "ld.global.v" not in ptx


def test_unprovable_alignment_falls_back_to_scalar_accesses():
    # An offset of 1 element is not 16-byte aligned: no vector access may be formed.
    text = KERNELS.read_text().replace("off = tv.block_idx(0) * block\n    a = tv.cast",
                                       "off = tv.block_idx(0) * block + 1\n    a = tv.cast")
    path = PROGRAMS / "_misaligned_tmp.py"
    try:
        path.write_text(text)
        ptx = compile_once(load_module(path).scale_relu.specialize(), "sm_90").ptx
    finally:
        path.unlink()
    assert "ld.global.v" not in ptx and "st.global.v" not in ptx


def test_every_register_tensor_gets_a_layout():
    program = run_passes(kernels.scale_relu.specialize())
    for inst in instructions(program.body):
        for t in [inst.output, *inst.input_tensors()]:
            if t is not None and t.space is MemorySpace.REGISTER:
                assert t.layout is not None and t.layout.num_threads == program.num_threads


@pytest.mark.parametrize("shape, dtype", [((256,), "f32"), ((1024,), "f16"), ((32, 64), "f16"),
                                          ((16,), "f32"), ((64, 24), "uint8"), ((1, 8), "f32")])
def test_default_layout_covers_the_tile_with_every_thread(shape, dtype):
    layout = default_layout(shape, parse(dtype), 128)
    assert layout.shape == shape and layout.num_threads == 128
    held = {tuple(c) for c in layout.table().reshape(-1, len(shape)).tolist()}
    assert len(held) == int(np.prod(shape))
    # Threads are only replicated when the tile has fewer elements than the block.
    assert layout.replication == max(1, 128 // int(np.prod(shape)))
    assert layout.local_size * layout.num_threads // layout.replication == int(np.prod(shape))


def test_unsupported_instruction_names_the_line():
    # `print` has no GPU lowering yet: the error names it and points at the user's line.
    text = KERNELS.read_text().replace(
        "    tv.store_global(gy, tv.where(acc > 0, acc, acc * 0.125), [off])",
        "    tv.print(acc)\n    tv.store_global(gy, tv.where(acc > 0, acc, acc * 0.125), [off])")
    path = PROGRAMS / "_print_tmp.py"
    try:
        path.write_text(text)
        kernel = load_module(path).scale_relu
        with pytest.raises(VMError, match="print is not supported by the GPU backend yet") \
                as err:
            compile_once(kernel.specialize(), "sm_80")
    finally:
        path.unlink()
    assert err.value.loc is not None and err.value.loc.file.endswith("_print_tmp.py")
    assert "tv.print(acc)" in str(err.value)




def test_vmc_compile_writes_ptx_and_checks_it(tmp_path, capsys):
    out = tmp_path / "vadd.ptx"
    status, _, err = vmc(capsys, "compile", str(ROOT / "examples" / "vector_add.py"), "-o",
                         str(out), "--arch", "sm_90", "--check")
    assert status == 0, err
    assert ".entry vector_add" in out.read_text()
    assert "vector_add" in err and "spill" in err


def test_vmc_compile_emits_ir_llvm_and_dumps_passes(capsys):
    path = str(KERNELS) + ":scale_relu"
    ir_text = vmc(capsys, "compile", path, "--emit", "ir", "--set", "block=256")[1]
    assert ir_text.startswith("kernel scale_relu(") and "constants(block='256'" in ir_text
    assert "define ptx_kernel void" in vmc(capsys, "compile", path, "--emit", "llvm")[1]
    dumped = vmc(capsys, "compile", path, "--dump-after", "infer_layouts")[1]
    assert dumped.startswith("// after infer_layouts") and "{spatial(" in dumped
    assert PASS_NAMES[0] == "verify"


def test_vmc_compile_emits_the_machine_code_ptxas_makes(capsys):
    """`--emit sass`: the PTX through ptxas, then nvdisasm (the test extras' wheels): the
    kernel's function, its global load and store and its exit, in sm_90a's encoding."""
    status, sass, err = vmc(capsys, "compile", str(ROOT / "examples" / "vector_add.py"),
                            "--emit", "sass", "--arch", "sm_90a")
    assert status == 0, err
    assert ".target\tsm_90a" in sass and ".text.vector_add" in sass
    assert all(op in sass for op in ("LDG.E", "STG.E", "EXIT"))


def test_vmc_compile_says_when_nvdisasm_is_missing(capsys, monkeypatch):
    def missing(name):
        raise ptxas.CudaToolNotFoundError(f"{name} was not found (test)")

    monkeypatch.setattr(ptxas, "find_cuda_tool", missing)
    status, _, err = vmc(capsys, "compile", str(ROOT / "examples" / "vector_add.py"),
                         "--emit", "sass", "--arch", "sm_90a")
    assert status != 0 and "nvdisasm was not found (test)" in err and "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["--arch", "sm_75"], "unknown GPU architecture"),
    (["--dump-after", "nope"], "no pass named"),
    (["--set", "block=0"], ""),
    (["--emit", "ir", "--check"], "needs --emit ptx"),
    (["--emit", "sass", "--check"], "needs --emit ptx"),
])
def test_vmc_compile_errors(args, message, capsys):
    status, _, err = vmc(capsys, "compile", str(ROOT / "examples" / "vector_add.py"), *args)
    assert status != 0 and "Traceback" not in err
    assert message in err


# ---- on the GPU ---------------------------------------------------------------------------



@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 1000, 4096, 5000])
def test_gpu_vector_add_matches_interpreter(n):
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)  # poisoned
    got, expected = run_both(vector_add, [x, y, out, n], {"block": 1024})
    assert np.array_equal(got[2], expected[2])


@pytest.mark.gpu
@pytest.mark.parametrize("n", [7, 512, 3000])
def test_gpu_scale_relu_matches_interpreter(n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float16)
    got, expected = run_both(kernels.scale_relu, [x, np.full(n, np.nan, np.float32), n, 0.75],
                              {})
    assert np.array_equal(got[1], expected[1])


def test_integer_tile_division_floors_in_the_interpreter():
    """The interpreter's `//` and `%` on integer tiles are Python's (the GPU test below
    holds the compiled kernel to them)."""
    x = np.arange(-300, 300, dtype=np.int32)
    y = np.zeros_like(x)
    kernels.int_floor_div.interpret(x, y, x.size)
    assert np.array_equal(y, (x // 3) * 1000 + x % -7)


@pytest.mark.gpu
def test_gpu_integer_tile_division_matches_interpreter():
    x = np.arange(-300, 300, dtype=np.int32)
    got, expected = run_both(kernels.int_floor_div, [x, np.zeros_like(x), x.size], {})
    assert np.array_equal(got[1], expected[1])


@pytest.mark.gpu
@pytest.mark.parametrize("M, N", [(16, 32), (17, 45), (100, 3)])
def test_gpu_tile_add_2d_matches_interpreter(M, N):
    rng = np.random.default_rng(M * N)
    a, b = (rng.standard_normal((M, N)).astype(np.float32) for _ in range(2))
    got, expected = run_both(kernels.tile_add_2d, [a, b, np.full((M, N), np.nan, np.float32),
                                                    M, N], {})
    assert np.array_equal(got[2], expected[2])


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1024, 2500])
def test_gpu_dequant_int8_matches_interpreter(n):
    rng = np.random.default_rng(n)
    q = rng.integers(-128, 128, n).astype(np.int8)
    s = rng.uniform(0.01, 1, -(-n // 1024)).astype(np.float16)
    got, expected = run_both(kernels.dequant_int8, [q, s, np.full(n, np.nan, np.float16), n], {})
    assert np.array_equal(got[2], expected[2])


@pytest.mark.gpu
def test_tv_compile_runs_with_torch_tensors():
    torch = pytest.importorskip("torch")
    n = 5000
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full((n,), float("nan"), device="cuda")
    add = tv.compile(vector_add, block=1024)
    add(x, y, out, n)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)
    with pytest.raises(TypeError, match="x"):  # a CPU tensor is refused before launch
        add(x.cpu(), y, out, n)


def _broadcast_map_by_definition(src, dst, oshape):
    """For every thread and local index of `dst`, the local index at which the thread
    holds the operand's element (broadcast dims read index 0), from `owners`."""
    rows = []
    for t in range(dst.num_threads):
        row = []
        for local_index in range(dst.local_size):
            coord = dst.global_index(t, local_index)[len(dst.shape) - len(oshape):]
            owners = dict(src.owners(tuple(c if s != 1 else 0 for c, s in zip(coord, oshape))))
            if t not in owners:
                return "not held"
            row.append(owners[t])
        rows.append(row)
    return rows[0] if all(r == rows[0] for r in rows) else "differs"


def test_broadcast_maps_agree_with_the_layouts_owners():
    """The codegen's vectorized operand-to-result map (`_broadcast_map`) against its
    definition, element by element: a kernel's scales broadcast along K (the map), a
    tile the result's threads do not hold, and one held at different indices per thread."""

    a = spatial(4, 1) * local(2, 4) * mma_m16n8k16_a()
    c = spatial(2, 2) * local(2, 4) * mma_m16n8k16_c()
    everywhere = local(32, 1) * replicated(32, ndim=2)
    cases = [(a.reduce(1), a, (128, 1)), (c.reduce(0), c, (1, 64)), (c, c, (64, 64)),
             (a.reduce(1).reduce(0), a, (1, 1)), (spatial(32, 1), spatial(8, 4) * local(4, 1),
                                                  (32, 1)),
             (everywhere, spatial(32, 1) * local(1, 4), (32, 1)),
             (everywhere, local(32, 4) * replicated(32, ndim=2), (32, 1)),
             (spatial(32), spatial(32, 1) * local(1, 4), (32,))]
    outcomes = set()
    for src, dst, oshape in cases:
        want = _broadcast_map_by_definition(src, dst, oshape)
        assert _broadcast_map(src, dst, oshape) == want, (src, dst)
        outcomes.add(want if isinstance(want, str) else "map")
    assert outcomes == {"map", "not held", "differs"}
