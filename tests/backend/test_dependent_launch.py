"""Programmatic dependent launch in the backend: `launch_dependents` and
`wait_prerequisites` become `griddepcontrol.launch_dependents` / `griddepcontrol.wait`
on sm_90 and later and nothing before; the producer warp waits too; the signature says
whether a kernel opts in (`dependent_launch`) and carries it through JSON; and on an
H100, a chain of kernels launched with and without the attribute gives numpy's result."""

from __future__ import annotations

import re

import numpy as np
import pytest
from kernel_harness import compile_once

from tilevm.backend.analysis.signature import Signature, signature_from_program
from tilevm.backend.analysis.target import TARGETS
from tilevm.backend.cuda import driver
from tilevm.backend.cuda.device_array import DeviceArray
from tilevm.backend.launch import compiled_kernel
from tilevm.backend.passes.context import PassContext
from tilevm.backend.passes.select_instructions import select_instructions
from tilevm.backend.pipeline import run_passes
from tilevm.backend.ptxas import PtxasNotFoundError, check_ptx, find_ptxas
from tilevm.ir import instructions as ins
from tilevm.ir.transform import instructions
from tilevm.vm import lang as tv

TILE = 1024


@tv.kernel(num_warps=4)
def step(src: tv.ptr(tv.int32, const=True), dst: tv.ptr(tv.int32), N: tv.int32):
    """dst = 3 src + 1 (wrapping), after the previous kernel: it may read `dst` or
    write `src`."""
    tv.grid(tv.cdiv(N, TILE))
    tv.launch_dependents()
    tv.wait_prerequisites()
    at = tv.block_idx(0) * TILE
    v = tv.load_global(tv.global_view(src, [N]), [at], [TILE])
    tv.store_global(tv.global_view(dst, [N]), v * 3 + 1, [at])


@tv.kernel(num_warps=4)
def step_without_wait(src: tv.ptr(tv.int32, const=True), dst: tv.ptr(tv.int32),
                      N: tv.int32):
    tv.grid(tv.cdiv(N, TILE))
    tv.launch_dependents()
    at = tv.block_idx(0) * TILE
    v = tv.load_global(tv.global_view(src, [N]), [at], [TILE])
    tv.store_global(tv.global_view(dst, [N]), v * 3 + 1, [at])


@tv.kernel(num_warps=4)
def staged(x: tv.ptr(tv.f16, const=True), y: tv.ptr(tv.f32), M: tv.int32):
    """A producer warp copies x's rows into shared memory (TMA on sm_90a)."""
    tv.producer_warp()
    tv.grid(tv.cdiv(M, 64))
    tv.wait_prerequisites()
    row = tv.block_idx(0) * 64
    buf = tv.alloc_shared(tv.f16, [64, 64])
    tv.copy_async(buf, tv.global_view(x, [M, 64]), [row, 0])
    tv.copy_async_commit()
    tv.copy_async_wait(0)
    tv.sync()
    acc = tv.cast(tv.load_shared(buf, [0, 0], [64, 64]), tv.f32)
    tv.store_global(tv.global_view(y, [M, 64]), acc, [row, 0])


def griddepcontrol_lines(ptx: str) -> list[str]:
    """The PTX's griddepcontrol and global-load instructions, in order."""
    return [m.group(0) for m in re.finditer(r"griddepcontrol\.\w+|ld\.global[.\w]*", ptx)]


@pytest.mark.parametrize("arch", list(TARGETS))
def test_selected_on_sm_90_and_later_only(arch: str) -> None:
    selected = select_instructions(step.specialize(), PassContext(arch))
    forms = {i.opname: i.lowering for i in instructions(selected.body)
             if isinstance(i, (ins.LaunchDependents, ins.WaitPrerequisites))}
    want = ins.lowering("griddepcontrol") if TARGETS[arch].sm >= 90 else None
    assert forms == {"launch_dependents": want, "wait_prerequisites": want}


def test_sm_90a_ptx_waits_before_the_first_global_load() -> None:
    found = griddepcontrol_lines(compile_once(step.specialize(), "sm_90a").ptx)
    assert found[:2] == ["griddepcontrol.launch_dependents", "griddepcontrol.wait"]
    assert found[2].startswith("ld.global") and "griddepcontrol" not in " ".join(found[2:])


def test_sm_80_ptx_has_no_griddepcontrol() -> None:
    ptx = compile_once(step.specialize(), "sm_80").ptx
    assert "griddepcontrol" not in ptx and "ld.global" in ptx


def test_ptxas_accepts_the_sm_90a_ptx() -> None:
    try:
        find_ptxas()
    except PtxasNotFoundError:
        pytest.skip("ptxas is not installed here")
    check_ptx(compile_once(step.specialize(), "sm_90a").ptx, "sm_90a")


def test_the_producer_warp_waits_before_its_copies() -> None:
    split = run_passes(staged.specialize(), arch="sm_90a")
    assert split.producer is not None
    for body in (split.producer, split.body):
        ops = [i.opname for i in instructions(body)]
        assert ops.index("wait_prerequisites") < ops.index("copy_async")


def test_signature_says_whether_the_kernel_opts_in() -> None:
    opted = signature_from_program(step.specialize())
    assert opted.dependent_launch
    assert not signature_from_program(step_without_wait.specialize()).dependent_launch
    assert Signature.from_json(opted.to_json()) == opted
    old = opted.to_json()
    del old["dependent_launch"]  # written before the field existed
    assert Signature.from_json(old).dependent_launch is False


@pytest.mark.gpu
@pytest.mark.parametrize("dependent", [False, True])
def test_gpu_chain_of_dependent_kernels_matches_numpy(dependent: bool) -> None:
    """16 kernels back to back on one stream, ping-ponging between two buffers: each
    reads what the previous one wrote and overwrites what it read. With the attribute
    each may start while the previous one runs (it signals at entry); the wait keeps
    the result exact."""
    if int(driver.device_arch()[3:5]) < 90:
        pytest.skip("programmatic dependent launch needs sm_90 or later")
    n = 1 << 22
    start = np.random.default_rng(0).integers(-2**31, 2**31, n, dtype=np.int32)
    bufs = [DeviceArray.from_numpy(start), DeviceArray.zeros(n, "int32")]
    kernel = compiled_kernel(step.specialize())
    launch = kernel.prepare(bufs[0], bufs[1], n, dependent=dependent)
    for i in range(16):
        launch.launch(0, bufs[i % 2].ptr, bufs[1 - i % 2].ptr)
    want = start.astype(np.int64)
    for _ in range(16):
        want = (want * 3 + 1) % 2**32
    np.testing.assert_array_equal(bufs[0].to_numpy(), want.astype(np.uint32).view(np.int32))


@pytest.mark.parametrize("blocks", [1, 2, 3, 7])
@pytest.mark.parametrize("static, dynamic", [(0, 0), (4096, 0), (1024, 30_000)])
@pytest.mark.parametrize("per_sm, reserved", [(233_472, 1024), (167_936, 1024),
                                              (65_536, 0)])
def test_capped_shared_bytes_lets_that_many_blocks_fit_and_no_more(
        blocks, static, dynamic, per_sm, reserved):
    from tilevm.backend.cuda.kernel import capped_shared_bytes

    shared = capped_shared_bytes(blocks, static, dynamic, per_sm, reserved)
    footprint = static + shared + reserved
    assert shared >= dynamic  # never less than the kernel uses
    assert (blocks + 1) * footprint > per_sm
    if (static + dynamic + reserved) * (blocks + 1) <= per_sm:  # the cap is what binds:
        assert blocks * footprint <= per_sm  # exactly `blocks` fit


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_a_cap_that_is_not_a_positive_int_is_refused(bad):
    from tilevm.backend.cuda.errors import ArgumentValueError
    from tilevm.backend.cuda.kernel import capped_shared_bytes

    with pytest.raises(ArgumentValueError, match="max_blocks_per_sm must be a positive int"):
        capped_shared_bytes(bad, 0, 0, 100_000, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("blocks", [1, 2, 5])
def test_gpu_a_prepared_launch_caps_its_blocks_per_sm(blocks: int) -> None:
    """The driver's occupancy for the shared memory the capped launch asks for is the
    cap, and the capped kernel still computes numpy's result."""
    n = 1 << 16
    src = np.arange(n, dtype=np.int32)
    a, b = DeviceArray.from_numpy(src), DeviceArray.zeros(n, "int32")
    kernel = compiled_kernel(step.specialize())
    launch = kernel.prepare(a, b, n, max_blocks_per_sm=blocks)
    drv = driver.bindings()
    resident = driver.call("occupancy", drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        kernel.handle, kernel.num_threads, launch.shared_bytes))
    assert resident == blocks
    launch.launch(0, a.ptr, b.ptr)
    np.testing.assert_array_equal(b.to_numpy(), src * 3 + 1)
