"""A producer warp (`tv.producer_warp()`, pass `split_producer_warp`): what the pass
splits, which syncs it keeps, what it refuses, and the PTX's barrier protocol."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from kernel_harness import compile_once, require_sm90

from tilevm.backend import pipeline
from tilevm.backend.launch import launch_program
from tilevm.backend.passes.context import PassContext
from tilevm.backend.passes.split_producer_warp import accesses, split_producer_warp
from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.parser import parse_program
from tilevm.ir.printer import format_program
from tilevm.ir.transform import instructions
from tilevm.ir.verifier import verify
from tilevm.kernels.matmul_launch import schedule_kernel
from tilevm.kernels.qmm_dequant import wt_matmul_kernel
from tilevm.kernels.schedule import wgmma
from tilevm.vm import lang as tv


@tv.kernel(num_warps=4)
def row_sums(x: tv.ptr(tv.f16, const=True), y: tv.ptr(tv.f32), M: tv.int32, *,
             producer: bool = True, gated: bool = False, reuse: str = "",
             registers: int | None = None):
    """Sums of 64-row blocks of x [M, 256], read 64 columns at a time through two
    buffers (copies through TMA on sm_90a); `gated` copies inside an `if`; `registers`:
    a producer warpgroup that keeps that many registers; `reuse`: a tile in the bytes
    of a buffer once the copies are over ("after_copies": y is read back from it), or
    with a copy still to come ("then_copy")."""
    if producer:
        tv.producer_warp(registers)
    tv.grid(tv.cdiv(M, 64))
    gx = tv.global_view(x, [M, 256])
    row = tv.block_idx(0) * 64
    bufs = [tv.alloc_shared(tv.f16, [64, 64]) for _ in range(2)]
    tv.copy_async(bufs[0], gx, [row, 0])
    tv.copy_async_commit()
    acc = tv.zeros([64, 64], tv.f32)
    for k0 in tv.range(0, 256, 128):
        for s in range(2):
            tv.copy_async_wait(0)
            tv.sync()
            acc = acc + tv.cast(tv.load_shared(bufs[s], [0, 0], [64, 64]), tv.f32)
            if gated:
                if k0 + s * 64 + 64 < 256:
                    tv.copy_async(bufs[1 - s], gx, [row, k0 + s * 64 + 64])
            else:
                tv.copy_async(bufs[1 - s], gx, [row, k0 + s * 64 + 64])
            tv.copy_async_commit()
    tv.copy_async_wait(0)
    if reuse:
        tv.free_shared(bufs[0])
        tv.sync()
        tmp = tv.alloc_shared(tv.f16, [64, 64])  # in the bytes of bufs[0]
        tv.store_shared(tmp, tv.cast(acc, tv.f16))
        tv.sync()
        acc = tv.cast(tv.load_shared(tmp, [0, 0], [64, 64]), tv.f32)
        if reuse == "then_copy":
            tv.copy_async(bufs[1], gx, [row, 0])
            tv.copy_async_commit()
            tv.copy_async_wait(0)
    tv.store_global(tv.global_view(y, [M, 1]), tv.sum(acc, 1, keepdim=True), [row, 0])


def _lowered(program, arch="sm_90a"):
    return compile_once(program, arch)


def test_the_producer_body_has_the_copies_and_the_body_keeps_only_needed_syncs():
    compiled = _lowered(row_sums.specialize())
    lowered = compiled.lowered
    assert compiled.num_threads == 160 and lowered.num_threads == 128
    producer = instructions(lowered.producer)
    assert {type(i) for i in producer} <= {ins.GlobalView, ins.AllocShared, ins.CopyAsync,
                                          ins.CopyAsyncCommit, ins.Assume}
    copies = [i for i in instructions(lowered.body) if isinstance(i, ins.CopyAsync)]
    assert copies == [i for i in producer if isinstance(i, ins.CopyAsync)]
    # Each sync that is left orders a store_shared and a load_shared of other threads
    # (the layout conversion through shared memory); the one per k-tile of the source
    # that ordered the copies only is gone from at least one k-tile.
    before = [i for i in instructions(run_until_split(row_sums.specialize()).body)
              if isinstance(i, ins.Sync)]
    after = [i for i in instructions(lowered.body) if isinstance(i, ins.Sync)]
    assert len(after) < len(before)
    # the PTX: one more warp, the ring and two "empty" barriers of 4 arrivals, a named
    # barrier of the 128 threads for the syncs left
    ptx = compiled.ptx
    assert re.search(r"\.maxntid 160\b", ptx)
    assert ptx.count("mbarrier.init") == pipeline.shared_plan(lowered).barriers
    assert "bar.sync 1, 128;" in ptx and "bar.warp.sync" in ptx


def test_a_producer_warpgroup_gives_its_registers_to_the_other_warps():
    compiled = _lowered(row_sums.specialize(registers=40))
    lowered, ptx = compiled.lowered, compiled.ptx
    assert compiled.num_threads == 256 and lowered.num_threads == 128
    assert (lowered.producer_warps, lowered.producer_registers) == (4, 40)
    # 256 threads start with 248 registers (65536 / 256, at most 255, in 8s): the 128
    # producer threads give 208 each back, and the 128 others may take up to 256
    assert (lowered.entry_registers, lowered.body_registers) == (248, 256)
    assert re.search(r"\.maxntid 256\b", ptx) and re.search(r"\.maxnreg 248\b", ptx)
    dec = ptx.index("setmaxnreg.dec.sync.aligned.u32 40;")
    inc = ptx.index("setmaxnreg.inc.sync.aligned.u32 256;")
    # the producer gives up its registers before its first thread's copies, and the
    # others take theirs once it has: the decrement sits in the producer's branch
    assert dec < ptx.index("cp.async.bulk.tensor") and dec < inc
    assert "bar.sync 1, 128;" in ptx
    # 8 warps and a producer warpgroup: 168 at entry (65536 / 384), 232 for the 8 warps
    # (168 * 384 - 40 * 128 = 232 * 256), the split of cuBLAS's Hopper kernels
    wide = _lowered(wt_matmul_kernel("f16").specialize(producer=True, lead=3))
    program = replace(wide.lowered, producer_warps=4, producer_registers=40)
    assert (program.entry_registers, program.body_registers) == (168, 232)
    text = format_program(_lowered(row_sums.specialize(registers=40)).lowered)
    assert "producer_warps(4) producer_registers(40)" in text
    assert format_program(parse_program(text)) == text


@pytest.mark.parametrize("num_warps, registers, message", [
    (4, 20, "multiple of 8 in 24..256"),
    (4, 44, "multiple of 8 in 24..256"),
    (4, 248, "starts with 248 registers"),
    (8, 160, "give the other warps none"),
    (6, 40, "num_warps a multiple of 4"),
    (32, 40, "the most a block may have is 32"),
])
def test_producer_registers_are_checked_at_the_call(num_warps, registers, message):
    @tv.kernel(num_warps=num_warps)
    def bad(y: tv.ptr(tv.f32)):
        tv.producer_warp(registers=registers)

    with pytest.raises(VMError, match=message):
        bad.specialize()


def test_the_verifier_checks_producer_registers():

    program = run_until_split(row_sums.specialize(registers=40))
    program = replace(program, producer=None)
    verify(program)
    for fields_, message in (
            (dict(producer_registers=0), "comes with producer_registers"),
            (dict(producer_warps=1), "comes with producer_registers"),
            (dict(producer_registers=36), "multiple of 8 in 24..256"),
            (dict(producer_registers=248), "give the other warps none")):
        with pytest.raises(VMError, match=message):
            verify(replace(program, **fields_))


def run_until_split(program):
    for name, run in pipeline.PASSES:
        if name == "split_producer_warp":
            return program
        program = run(program, PassContext("sm_90a"))
    raise AssertionError("no split_producer_warp pass")


def test_a_program_without_a_producer_warp_passes_unchanged():
    program = run_until_split(row_sums.specialize(producer=False))
    assert split_producer_warp(program) is program


def test_the_split_program_prints_and_parses_back():
    lowered = _lowered(wt_matmul_kernel("f16").specialize(producer=True, lead=3)).lowered
    text = format_program(lowered)
    assert "producer_warps(1)" in text and "\n} producer {\n" in text
    again = parse_program(text)
    assert format_program(again) == text
    assert again.producer_warps == 1 and again.producer == lowered.producer


def test_the_interpreter_ignores_the_producer_warp():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((100, 256)).astype(np.float16)
    sums = []
    for producer in (False, True):
        y = np.full((100, 1), np.nan, np.float32)
        row_sums.interpret(x, y, 100, producer=producer)
        sums.append(y)
    np.testing.assert_array_equal(sums[0], sums[1])
    np.testing.assert_allclose(sums[1][:, 0], x.astype(np.float64).sum(1), rtol=1e-5)


def test_wt_matmul_with_a_producer_warp_needs_no_sync_and_allows_lead_stages_minus_1():
    k = wt_matmul_kernel("f16")
    lowered = _lowered(k.specialize(producer=True, lead=3)).lowered
    assert not [i for i in instructions(lowered.body) if isinstance(i, ins.Sync)]
    with pytest.raises(VMError, match=r"lead=3 \(1..2\)"):
        k.specialize(lead=3)


@pytest.mark.parametrize("case, message, line", [
    ("sm_80", "does not go through TMA", "tv.copy_async(bufs[0], gx, [row, 0])"),
    ("gated", "group may have no copy", "tv.copy_async_commit()"),
    ("then_copy", "reuses bytes of %bufs", "tmp = tv.alloc_shared"),
])
def test_a_program_the_pass_cannot_split_is_refused_at_its_line(case, message, line):
    program = row_sums.specialize(gated=case == "gated",
                                  reuse="then_copy" if case == "then_copy" else "")
    with pytest.raises(VMError, match=message) as err:
        _lowered(program, "sm_80" if case == "sm_80" else "sm_90a")
    assert line in str(err.value)


def test_copies_addressed_by_an_instruction_result_are_refused():
    @tv.kernel(num_warps=4)
    def ticket(x: tv.ptr(tv.f16, const=True), y: tv.ptr(tv.f16), count: tv.ptr(tv.int32),
               M: tv.int32):
        tv.producer_warp()
        tv.grid(1)
        slot = tv.atomic_add(tv.global_view(count, [1]), [0])
        buf = tv.alloc_shared(tv.f16, [64, 64])
        tv.copy_async(buf, tv.global_view(x, [M, 64]), [slot * 64, 0])
        tv.copy_async_commit()
        tv.copy_async_wait(0)
        tv.sync()
        tv.store_global(tv.global_view(y, [64, 64]), tv.load_shared(buf, [0, 0], [64, 64]),
                        [0, 0])

    with pytest.raises(VMError, match="offsets are computed from an instruction's result"):
        _lowered(ticket.specialize())


def test_producer_warp_is_called_once_outside_runtime_control_flow():
    @tv.kernel(num_warps=4)
    def twice(y: tv.ptr(tv.f32)):
        tv.producer_warp()
        tv.producer_warp()

    @tv.kernel(num_warps=4)
    def in_loop(y: tv.ptr(tv.f32), n: tv.int32):
        for _ in tv.range(0, n):
            tv.producer_warp()

    @tv.kernel(num_warps=32)
    def full(y: tv.ptr(tv.f32)):
        tv.producer_warp()

    with pytest.raises(VMError, match="called twice"):
        twice.specialize()
    with pytest.raises(VMError, match="inside a runtime for"):
        in_loop.specialize()
    with pytest.raises(VMError, match="already has 32 warps"):
        full.specialize()


def test_what_a_sync_may_order():
    program = run_until_split(row_sums.specialize())
    kinds = {i.opname: accesses(i) for i in instructions(program.body)}
    assert kinds["copy_async"] == frozenset()  # ordered by the barriers
    assert {k for _, k in kinds["store_global"]} == {"write"}
    assert {k for _, k in kinds["load_shared"]} == {"read"}


def test_the_optimizer_keeps_each_warp_sync_where_the_lowering_put_it():
    """Every inline PTX call is `convergent` (backend.llvm.builder), so LLVM may not
    copy a `bar.warp.sync` into the arms of a branch that divides the warp: the column
    tiles sharing x (a producer warp, lane 0's releases one after another) once had 18
    in the PTX for 12 written, which ptxas ran through its path for divided warps."""
    s = wgmma(64, 4, 4, 128, lead=2, prefetch=2, cluster_n=2)
    program = schedule_kernel(s).specialize(wdtype=tv.int4, group_size=128,
                                            has_zeros=False, wide_stores=True,
                                            **s.constants())
    compiled = compile_once(program, "sm_90a")
    asm_calls = compiled.llvm_ir.count(" asm ")  # (some span lines: multi-line PTX)
    assert asm_calls and len(re.findall(r"\) convergent$", compiled.llvm_ir, re.M)) == asm_calls
    written = compiled.llvm_ir.count("bar.warp.sync")
    assert written > 1 and compiled.ptx.count("bar.warp.sync") == written


@pytest.mark.gpu
def test_gpu_producer_warp_matches_the_interpreter_and_float64():

    require_sm90("TMA copies and wgmma")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((200, 256)).astype(np.float16)
    for registers, reuse in ((None, ""), (40, ""), (None, "after_copies")):
        # a producer warp, a producer warpgroup (setmaxnreg), a tile in a buffer's bytes
        program = row_sums.specialize(registers=registers, reuse=reuse)
        want = np.full((200, 1), np.nan, np.float32)
        row_sums.interpret(x, want, 200, reuse=reuse)
        got = np.full((200, 1), np.nan, np.float32)
        launch_program(program, [x, got, 200])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    # the matmul with 3 of 4 stages ahead, ragged M and N, K past whole loop iterations
    k = wt_matmul_kernel("f16")
    for M, N, K, lead in ((300, 200, 1088, 3), (257, 136, 4096, 2)):
        x = rng.standard_normal((M, K)).astype(np.float16)
        wt = rng.standard_normal((N, K)).astype(np.float16)
        y = np.full((M, N), np.nan, np.float16)
        launch_program(k.specialize(producer=True, lead=lead), [x, wt, y, M, N, K])
        ref = x.astype(np.float64) @ wt.astype(np.float64).T
        bound = 2.0 ** -11 * np.abs(ref).max() + K * 2.0 ** -24 * np.abs(ref).max()
        assert np.abs(y - ref).max() <= bound


def test_a_result_carried_round_a_loop_through_several_variables_is_found():
    @tv.kernel(num_warps=4)
    def chain(x: tv.ptr(tv.f16, const=True), y: tv.ptr(tv.f16), count: tv.ptr(tv.int32),
              M: tv.int32):
        tv.producer_warp()
        tv.grid(1)
        gx = tv.global_view(x, [M, 64])
        buf = tv.alloc_shared(tv.f16, [64, 64])
        a = b = c = M * 0
        for _ in tv.range(0, 4):  # c gets the atomic's result on the third iteration
            c = b
            b = a
            a = tv.atomic_add(tv.global_view(count, [1]), [0])
            tv.copy_async(buf, gx, [c * 64, 0])
            tv.copy_async_commit()
            tv.copy_async_wait(0)
            tv.sync()
            tv.store_global(tv.global_view(y, [64, 64]),
                            tv.load_shared(buf, [0, 0], [64, 64]), [0, 0])
            tv.sync()

    with pytest.raises(VMError, match="offsets are computed from an instruction's result"):
        _lowered(chain.specialize())
