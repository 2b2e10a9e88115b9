"""`dot` with a shared b: the frontend and verifier, the interpreter (against numpy, and
its race check), the lowering choice (wgmma, sm_90a only, with a clear error elsewhere),
the PTX it becomes (descriptors per swizzle mode, the proxy fence, waits deferred out of
the loop body's dots, zero accumulators as scale-d flags), and on a Hopper GPU (marked
`gpu`) the results against numpy."""

from __future__ import annotations

import re

import numpy as np
import pytest
from kernel_harness import PROGRAMS, compile_once, load_module, require_sm90

from tilevm.backend.analysis.wgmma_waits import analyze
from tilevm.backend.launch import launch_program
from tilevm.backend.pipeline import run_passes, shared_plan
from tilevm.backend.ptxas import check_ptx
from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.parser import parse_program
from tilevm.ir.printer import format_program
from tilevm.ir.transform import instructions
from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
from tilevm.kernels.tilings import WGMMA_HALF_ATOM_TILES, wgmma_tile
from tilevm.layouts.shared_layout import row_major, swizzled
from tilevm.vm import lang as tv

k = load_module(PROGRAMS / "wgmma_kernels.py")

VARIANTS = [dict(), dict(bm=128), dict(bm=128, num_warps=8), dict(bk=32),
            dict(through_shared=True), dict(bk=16, bn=128), dict(bn=256, bm=64),
            dict(bn=256, bm=256, num_warps=16), dict(bn=136, bm=256, num_warps=16)]


def _args(M: int, N: int, K: int, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    bt = rng.uniform(-1, 1, (N, K)).astype(np.float16)
    return a, bt, np.full((M, N), np.nan, np.float32), a.astype(np.float64) @ \
        bt.astype(np.float64).T


@pytest.mark.parametrize("kw", VARIANTS[:5])
def test_interpreter_matches_numpy(kw):
    a, bt, y, ref = _args(70, 72, 128)
    k.shared_b_matmul.interpret(a, bt, y, 70, 72, 128, **kw)
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-4)


RINGS = [dict(stages=3, lead=1), dict(stages=4, lead=1), dict(stages=4, lead=2)]


@pytest.mark.parametrize("kw", RINGS[:2])
def test_a_ring_of_tiles_matches_numpy_in_the_interpreter(kw):
    """The ring kernel is race-free (the interpreter checks) and computes a @ b."""
    a, bt, y, ref = _args(70, 72, 320)
    k.ring_matmul.interpret(a, bt, y, 70, 72, 320, **kw)
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-4)


SHARED_A = [dict(), dict(bm=128), dict(bm=128, num_warps=8), dict(bk=32, bn=256),
            dict(bm=256, num_warps=8, bn=128), dict(bm=256, num_warps=16, bn=256)]


@pytest.mark.parametrize("kw", SHARED_A[:3])
def test_a_shared_a_matches_numpy_in_the_interpreter(kw):
    a, bt, y, ref = _args(70, 72, 128)
    k.shared_ab_matmul.interpret(a, bt, y, 70, 72, 128, **kw)
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-4)


@pytest.mark.parametrize("kw, rows", [(dict(), 1), (dict(bm=128), 2),
                                       (dict(bm=128, num_warps=8), 1),
                                       (dict(bm=256, num_warps=8), 2)])
def test_a_shared_a_is_read_through_its_own_descriptor(kw, rows):
    """With a in shared memory each wgmma takes two descriptors (`m64nNk16` with a
    64-bit a operand): a warpgroup's 64-row blocks of a each have their own (the rows
    after the first picked by the warpgroup index when there are two), b one; k-step
    `kk` adds `2 kk` (32 bytes) to both."""
    ptx = compile_once(k.shared_ab_matmul.specialize(**kw), "sm_90a").ptx
    mmas = re.findall(r"\{ \.reg \.pred p; setp[^;]*; (.*?)wgmma\.mma_async\.sync\.aligned"
                      r"\.m64n64k16\.f32\.f16\.f16 \{[^}]*\}, (\S+), (\S+), p, 1, 1, 0, 0;",
                      ptx)
    assert len(mmas) == rows * 4  # (64-row blocks a warpgroup computes) x k-steps
    a_bases, b_bases, offsets = set(), set(), []
    for setup, a, b in mmas:
        found = re.findall(r"add\.s64 (\w+), (%rd\d+), (\d+);", setup)
        bases = {name: base for name, base, _ in found}
        step = {int(v) for _, _, v in found}  # one k-step's offset for both, or none
        assert len(step) <= 1 and len(found) in ((0,) if not step else (2,))
        offsets.append(step.pop() if step else 0)
        a_bases.add(bases.get(a, a))
        b_bases.add(bases.get(b, b))
    assert sorted(offsets) == sorted([0, 2, 4, 6] * rows)
    assert len(a_bases) == rows and len(b_bases) == 1
    assert "C7513" not in check_ptx(ptx, "sm_90a").log


def test_a_shared_a_the_tensor_cores_cannot_read_is_reported():
    @tv.kernel(num_warps=4)
    def m_major(y: tv.ptr(tv.f32)):
        as_ = tv.alloc_shared(tv.f16, [64, 64], layout=swizzled([64, 64], tv.f16)
                              .permute((1, 0)))
        bs = tv.alloc_shared(tv.f16, [64, 64],
                             layout=swizzled([64, 64], tv.f16).permute((1, 0)))
        tv.store_shared(as_, tv.zeros([64, 64], tv.f16))
        tv.store_shared(bs, tv.zeros([64, 64], tv.f16))
        tv.sync()
        tv.store_global(tv.global_view(y, [64, 64]), tv.dot(as_, bs), [0, 0])

    with pytest.raises(VMError, match=r"dot with a shared a \[64, 64\]: a's layout .* is "
                       r"not one the tensor cores read.*swizzled\(\[64, K\], dtype\)`"):
        compile_once(m_major.specialize(), "sm_90a")


@pytest.mark.parametrize("refill_a", [True, False])
def test_a_write_into_a_shared_a_in_flight_waits_for_it(refill_a):
    """The wait analysis counts a shared a among the tiles a group reads: the barrier
    before refilling the a tile retires the group that reads it; refilling another tile
    lets it run on."""
    @tv.kernel(num_warps=4)
    def refill(x: tv.ptr(tv.f16, const=True), y: tv.ptr(tv.f32)):
        v = tv.load_global(tv.global_view(x, [64, 64]), [0, 0], [64, 64])
        as_ = tv.alloc_shared(tv.f16, [64, 64], layout=swizzled([64, 64], tv.f16))
        bs = tv.alloc_shared(tv.f16, [64, 64],
                             layout=swizzled([64, 64], tv.f16).permute((1, 0)))
        other = tv.alloc_shared(tv.f16, [64, 64])
        tv.store_shared(as_, v)
        tv.store_shared(bs, v)
        tv.sync()
        acc = tv.dot(as_, bs, tv.zeros([64, 64], tv.f32))
        tv.sync()
        tv.store_shared(as_ if refill_a else other, v)
        tv.sync()
        tv.store_global(tv.global_view(y, [64, 64]), tv.dot(as_, bs, acc), [0, 0])

    program = run_passes(refill.specialize(), arch="sm_90a")
    insts = instructions(program.body)
    tiles = [i.out.name for i in insts if isinstance(i, ins.AllocShared)]
    waits = analyze(program.body, {t: (8192 * j, 8192 * (j + 1)) for j, t in enumerate(tiles)})
    syncs = [i for i in insts if isinstance(i, ins.Sync)]
    assert waits.keep.get(id(syncs[1])) == (0 if refill_a else None)


def test_text_form_reads_back():
    program = k.shared_b_matmul.specialize()
    text = format_program(program)
    assert parse_program(text) == program
    lowered = format_program(run_passes(program))
    assert "lowering=wgmma(shape='m64n64k16', acc='f32')" in lowered


def test_a_shared_a_is_rejected_at_the_users_line():
    @tv.kernel(num_warps=4)
    def shared_a(y: tv.ptr(tv.f32)):
        s = tv.alloc_shared(tv.f16, [64, 16])
        tv.dot(s, tv.zeros([16, 8], tv.f16))

    with pytest.raises(VMError, match=r"tv.dot a \(with a register b\) needs a register "
                       "tile, but .* shared") as err:
        shared_a.specialize()
    assert "tv.dot(s, " in str(err.value)


def test_the_interpreter_reports_a_write_without_sync_as_a_race():
    @tv.kernel(num_warps=4)
    def no_sync(y: tv.ptr(tv.f32)):
        bs = tv.alloc_shared(tv.f16, [16, 64])
        tv.store_shared(bs, tv.zeros([16, 64], tv.f16))
        tv.store_global(tv.global_view(y, [64, 64]),
                        tv.dot(tv.zeros([64, 16], tv.f16), bs), [0, 0])

    with pytest.raises(VMError, match="shared-memory race"):
        no_sync.interpret(np.zeros((64, 64), np.float32))


def test_other_architectures_get_a_clear_error():
    with pytest.raises(VMError, match="needs --arch sm_90a; compiling for sm_90") as err:
        compile_once(k.shared_b_matmul.specialize(), "sm_90")
    assert "tv.dot(" in str(err.value)  # the user's line


@pytest.mark.parametrize("bk, mode, row", [(64, 1, 128), (32, 2, 64), (16, 3, 32)])
def test_descriptors_name_the_swizzle_mode_and_column_stride(bk, mode, row):
    ptx = compile_once(k.shared_b_matmul.specialize(bk=bk), "sm_90a").ptx
    upper = (mode << 62) | ((8 * row >> 4) << 32) | (1 << 16)
    assert str(upper - (1 << 64 if upper >> 63 else 0)) in ptx  # (PTX prints it signed)
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16") == bk // 16


def test_descriptors_keep_every_bit_of_a_buffer_start_aligned_to_1024_bytes_only():
    """The result's tile (256-byte rows: a swizzle period of 2048 bytes) sits at a multiple
    of 2048 of the buffer, whose start is still declared 1024-aligned: an H100 starts it
    at 1024 mod 2048, and with `.align 2048` LLVM built b's descriptors without address
    bit 10 (its mask 0x3F80 of the address >> 4), so wgmma read b 1024 bytes off."""
    compiled = compile_once(k.shared_b_matmul.specialize(through_shared=True), "sm_90a")
    plan = shared_plan(compiled.lowered)
    assert plan.allocations["out"].align == 2048 and plan.base_align == 1024
    ptx = compiled.ptx
    assert ".extern .shared .align 1024 .b8" in ptx
    masks = re.findall(r"and\.b32\s+%r\d+, %r\d+, (\d+);", ptx)
    assert "16320" in masks and "16256" not in masks  # 0x3FC0: bits 10..17 of the address


def test_a_loop_body_of_dots_waits_once_before_its_barrier():
    """The wgmmas of a k-tile run while the next k-tile's operands are prepared: the
    wait comes before the next shared-memory write (the loop's sync), not after each
    dot, and shared writes are fenced to the async proxy before each barrier."""
    ptx = compile_once(k.shared_b_matmul.specialize(), "sm_90a").ptx
    body = ptx[ptx.index("wgmma.fence"):]
    assert body.index("wgmma.commit_group") < body.index("wgmma.wait_group.sync.aligned 0")
    assert ptx.count("fence.proxy.async.shared::cta") == ptx.count("bar.sync")


def _waits(ptx: str) -> list[str]:
    """The `wgmma.wait_group` counts, in the order of the PTX."""
    return re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+);", ptx)


@pytest.mark.parametrize("stages, lead", [(3, 2), (3, 1), (4, 1), (4, 2), (4, 3)])
def test_a_barrier_waits_only_for_the_groups_whose_tile_is_refilled_next(stages, lead):
    """Copies `lead` k-tiles ahead into a ring of `stages` tiles: the copy after each
    barrier refills the tile of k-tile `t + lead - stages`. With `lead = stages - 1`
    that is the tile of the previous k-tile's group, so the barrier retires it (wait 0);
    with less, the barrier does not wait and the previous k-tile's group runs on while
    the next is prepared, each `dot` retiring the groups before its own (wait 1: one
    group at a time holds its A registers, `wgmma_waits.IN_FLIGHT_AFTER_DOT`)."""
    compiled = compile_once(k.ring_matmul.specialize(stages=stages, lead=lead), "sm_90a")
    program = compiled.lowered
    insts = instructions(program.body)
    tiles = [i.out.name for i in insts if isinstance(i, ins.AllocShared)]
    waits = analyze(program.body, {t: (8192 * j, 8192 * (j + 1)) for j, t in enumerate(tiles)})
    syncs = [i for i in insts if isinstance(i, ins.Sync)]
    dots = [i for i in insts if isinstance(i, ins.Dot)]
    assert len(syncs) == len(dots) == stages  # the loop's k-tiles
    refills_previous = lead == stages - 1
    assert [waits.keep.get(id(i)) for i in syncs] == [0 if refills_previous else None] * stages
    assert [waits.keep_after.get(id(i)) for i in dots] == \
        [None if refills_previous else 1] * stages
    assert ("wgmma.wait_group.sync.aligned 1;" in compiled.ptx) == (not refills_previous)


@pytest.mark.parametrize("overlap", [False, True])
def test_a_barrier_before_a_write_into_a_tile_in_flight_waits_for_it(overlap):
    """The analysis compares bytes, not names: a tile the shared plan places over the
    first `dot`'s tile (after that tile's last use) is written only once the first
    group is retired; a tile elsewhere lets it run on."""
    program = run_passes(k.two_tiles.specialize(), arch="sm_90a")
    b1, b2 = (i.out.name for i in instructions(program.body)
              if isinstance(i, ins.AllocShared))
    waits = analyze(program.body, {b1: (0, 8192),
                                   b2: (0, 8192) if overlap else (8192, 16384)})
    syncs = [i for i in instructions(program.body) if isinstance(i, ins.Sync)]
    assert len(syncs) == 3
    assert id(syncs[0]) not in waits.keep  # nothing in flight yet
    assert waits.keep.get(id(syncs[1])) == (0 if overlap else None)
    store = next(i for i in instructions(program.body) if isinstance(i, ins.StoreGlobal))
    assert waits.keep[id(store)] == 0 and waits.keep_at_end is None  # retired at the store


def test_a_zero_accumulator_is_a_scale_d_flag_not_registers():
    """`acc = zeros` that wgmma dots accumulate into writes no registers (the first wgmma
    of each 64-row group takes scale-d 0 from a loop-carried flag), so no instruction but
    a wgmma defines an accumulator while wgmmas are in flight, which ptxas would answer
    by serializing every wgmma (C7515), and they stay in flight round the back edge."""
    ptx = compile_once(k.shared_b_matmul.specialize(bm=128), "sm_90a").ptx
    assert "0f00000000" not in ptx[:ptx.index("wgmma.fence")]  # no zeros before the loop
    assert "C7515" not in check_ptx(ptx, "sm_90a").log

    qmm = qmm_wgmma_kernel("f16").specialize(wdtype=tv.int4, group_size=128, bm=128,
                                             stages=2)
    assert "C7515" not in check_ptx(compile_once(qmm, "sm_90a").ptx, "sm_90a").log


@pytest.mark.parametrize("wdtype", ["int4", "f6e3m2"])
def test_the_quantized_kernel_converts_a_k_tile_while_the_previous_one_multiplies(wdtype):
    """The prefill kernel with x two k-tiles ahead in four stages: each k-tile's wgmmas
    stay in flight across the next barrier (the `dot` after it retires them: wait 1, no
    wait 0 in the loop), and ptxas keeps them asynchronous (no C7513/C7515: it does not
    serialize the wgmmas, which it does where registers of a group in flight are
    redefined; two groups' A registers fit beside 128 accumulators)."""

    qmm = qmm_wgmma_kernel("f16").specialize(wdtype=getattr(tv, wdtype), group_size=128,
                                             bm=128, stages=4, lead=2)
    ptx = compile_once(qmm, "sm_90a").ptx
    waits = _waits(ptx)
    assert waits.count("1") == 4 and waits.count("0") == 2, waits  # loop; after it
    report = check_ptx(ptx, "sm_90a")
    assert "C7513" not in report.log and "C7515" not in report.log
    assert report[qmm.name].spill_bytes == 0


@pytest.mark.parametrize("wdtype", ["int8", "uint8", "f8e5m2", "f6e3m2", "uint6"])
def test_half_atoms_feed_the_tensor_cores_from_the_conversions_registers(wdtype):
    """The register-A kernel with half atoms (6- and 8-bit codes) in its tuned tiling: a
    warpgroup's 64 columns are one m64n256 wgmma whose A operand is registers (the
    converted weights; no shared tile of weights), 4 a k-tile in a loop of 4 k-tiles, kept
    asynchronous by ptxas (no C7513/C7515), without spills."""

    s = wgmma_tile(WGMMA_HALF_ATOM_TILES[0], 128, half_atoms=True)
    qmm = qmm_wgmma_kernel("f16").specialize(wdtype=getattr(tv, wdtype), group_size=128,
                                             wide_stores=True, **s.constants())
    ptx = compile_once(qmm, "sm_90a").ptx
    mmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\S*\s+\{[^}]*\},"
                      r"\s*(\{|%rd)", ptx)
    assert mmas == [("m64n256k16", "{")] * 16  # A as a register list, not a descriptor
    assert "stmatrix" not in ptx
    report = check_ptx(ptx, "sm_90a")
    assert "C7513" not in report.log and "C7515" not in report.log
    assert report[qmm.name].spill_bytes == 0


@pytest.mark.parametrize("name", ["shared_b_matmul", "shared_ab_matmul"])
@pytest.mark.parametrize("bn, num_warps, widths", [(256, 4, [256]), (256, 16, [128, 128]),
                                                   (136, 16, [128, 8])])
def test_a_block_of_512_threads_cuts_wide_wgmmas_in_two(name, bn, num_warps, widths):
    """16 warps start with 128 registers a thread, under the 154 ptxas asks for an
    m64n256 wgmma (C7602, a fatal error): each row's tile is then one wgmma of the first
    128 columns and one of the rest, and ptxas compiles it (the GPU cases check the
    second one's descriptor: `test_gpu_matches_numpy`)."""
    program = getattr(k, name).specialize(bn=bn, bm=64 * num_warps // 4, num_warps=num_warps)
    ptx = compile_once(program, "sm_90a").ptx
    assert sorted(set(re.findall(r"m64n(\d+)k16", ptx)), key=int) == \
        [str(w) for w in sorted(set(widths))]
    # one 64-row tile a warpgroup, 4 k-steps of 16 (bk = 64), each cut in len(widths)
    assert len(re.findall(r"wgmma\.mma_async", ptx)) == 4 * len(widths)
    assert program.name in check_ptx(ptx, "sm_90a").kernels


def test_a_shared_b_the_tensor_cores_cannot_read_is_reported():
    @tv.kernel(num_warps=4)
    def n_major(y: tv.ptr(tv.f32)):
        bs = tv.alloc_shared(tv.f16, [64, 64], layout=row_major([64, 64], tv.f16))
        tv.store_shared(bs, tv.zeros([64, 64], tv.f16))
        tv.sync()
        tv.store_global(tv.global_view(y, [64, 64]),
                        tv.dot(tv.zeros([64, 64], tv.f16), bs), [0, 0])

    with pytest.raises(VMError, match="is not one the tensor cores read; they read K-major"):
        compile_once(n_major.specialize(), "sm_90a")


GPU_CASES = [("shared_b_matmul", kw) for kw in VARIANTS] + \
    [("ring_matmul", kw) for kw in RINGS] + [("shared_ab_matmul", kw) for kw in SHARED_A]


@pytest.mark.gpu
@pytest.mark.parametrize("name, kw", GPU_CASES)
def test_gpu_matches_numpy(name, kw):
    """Ragged M, N and K against numpy; in the ring kernel wgmma groups left in flight
    across a barrier (`wait_group 1` or `2`) read their tiles before the copies refill
    them."""

    require_sm90("wgmma")
    kernel = getattr(k, name).specialize(**kw)
    longer = (64, 64, 1088) if name == "ring_matmul" else (64, 64, 64)
    for M, N, K in ((100, 200, 192), longer, (1, 8, 320)):
        a, bt, y, ref = _args(M, N, K, seed=M)
        launch_program(kernel, [a, bt, y, M, N, K])
        np.testing.assert_allclose(y, ref, rtol=0, atol=1e-4)
    # K = 0: no dot runs, the accumulator is still the zero tile (its flag, not registers);
    # the ring kernel's TMA map of the empty b is one zeroed element
    a, bt, y, _ = _args(70, 80, 16)
    launch_program(kernel, [a, bt, y, 70, 80, 0])
    np.testing.assert_array_equal(y, np.zeros_like(y))
