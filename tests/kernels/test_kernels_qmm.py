"""The quantized matmul of tilevm.kernels: the fragments weight format against the PTX
ISA's mma B-fragment formula, the kernel in the interpreter against a float64
reference (every kernel family the tuner can pick at any N and K = 3 groups, nothing
stored past y), every weight type compiled without spills, the schedule space, the
tuning table; on the GPU (marked `gpu`) every weight type of ../shared/BENCHMARKS.md with
f16 and bf16 activations, ragged M and N (issue 43's N in {1, 7, 100, 4100, 12289} with
K = 3 groups for every family), zero points, split-K and `QuantizedLinear` against a
float64 `x @ dequantize(W)`."""

from __future__ import annotations

import importlib.util
import json
import re
import warnings
import zlib
from dataclasses import asdict, replace
from types import SimpleNamespace

import numpy as np
import pytest
from kernel_harness import (
    ROOT,
    SPILL_SLACK,
    compile_once,
    ptxas_report,
    qmm_problem,
    qmm_tolerance,
    require_sm90,
)

from tilevm import dtypes
from tilevm.ir.errors import VMError
from tilevm.kernels import matmul, matmul_launch, tilings
from tilevm.kernels.matmul_launch import schedule_kernel
from tilevm.kernels.qmm import qmm_kernel, splitk_sizes, workspace_order
from tilevm.kernels.qmm_dequant import dequantize_kernel
from tilevm.kernels.qmm_staged import qmm_staged_kernel
from tilevm.kernels.qmm_wgmma import REGISTER_A_AHEAD
from tilevm.kernels.schedule import Schedule, k_tile, staged, wgmma
from tilevm.kernels.tilings import (
    WGMMA_HALF_ATOM_TILES,
    WGMMA_TILES,
    WGMMA_TILES_BESIDE_SHARED,
    candidates,
    default_schedule,
    dequant_schedule,
    middle_tiles,
    wgmma_tile,
)
from tilevm.kernels.weight_format import (
    ATOM,
    FRAGMENTS,
    fragment_order,
    fragment_order_inverse,
    pack_weights,
    padded_n,
)
from tilevm.kernels.weights import quantize
from tilevm.layouts import spatial

BENCH_TYPES = ("int4", "uint4", "int2", "int3", "int5", "int6", "int8", "uint2", "uint3",
               "f3e1m1", "f4e2m1", "f5e2m2", "f6e3m2", "f6e2m3", "f8e4m3", "f8e5m2")
HAS_TORCH = importlib.util.find_spec("torch") is not None


# ---- the weight format ------------------------------------------------------------------

@pytest.mark.parametrize("bits", [1, 2, 3, 4, 6, 8])
def test_each_lane_gets_its_mma_b_fragments(bits):
    """Lane t = 4g + c of an atom holds, for the 2 x 4 fragments (i, j), the B elements
    (k, n) = (16i + 2c + {0, 1} + 8 * {0, 1}, 8j + g): the PTX ISA's m16n8k16 B layout
    (b0, b1 in the first register, b2, b3 in the second). The fragments of half atom 0
    (j in {0, 1}, 16 columns) come first, then half atom 1's, each half in (i, j) order.
    The run stores each register's two codes where a conversion pairs them (`lane_pairs`:
    d codes apart, d * b = 16 mod 32, the first half of each block of 2d with the
    second; for b in {1, 2, 4, 8} half a 32-bit word apart)."""
    K, N = 64, 96
    codes = np.arange(K * N).reshape(K, N)
    ordered = fragment_order(codes, bits)
    assert ordered.shape == (K // ATOM, N // ATOM, 32, 32)
    d = next(d for d in range(1, 33) if d * bits % 32 == 16)
    for ak in range(K // ATOM):
        for an in range(N // ATOM):
            for lane in range(32):
                g, c = divmod(lane, 4)
                want = [codes[ATOM * ak + 16 * i + 2 * c + r + 8 * h, ATOM * an + 8 * j + g]
                        for half in range(2) for i in range(2) for j in (2 * half, 2 * half + 1)
                        for h in range(2) for r in range(2)]
                run = list(ordered[ak, an, lane])
                for block in range(0, ATOM, 2 * d):  # [r0 r2 r4 ... | r1 r3 r5 ...]
                    mine = want[block:block + 2 * d]
                    assert run[block:block + 2 * d] == mine[0::2] + mine[1::2]
    assert np.array_equal(fragment_order_inverse(ordered, bits), codes)


@pytest.mark.parametrize("wdtype", ["int4", "int3", "f6e3m2", "int8", "uint1"])
def test_fragments_pack_a_lane_run_per_4b_bytes(wdtype):
    wd = dtypes.parse(wdtype)
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 1 << wd.bits, (64, 64)).astype(np.uint8)
    packed = pack_weights(codes, wd, FRAGMENTS)
    assert packed.shape == (2, 64 * 4 * wd.bits)
    runs = packed.reshape(-1, 4 * wd.bits)
    order = fragment_order(codes, wd.bits).reshape(-1, 32)
    for run, lane_codes in zip(runs[:40], order[:40]):  # dtypes.unpack is the reference
        assert np.array_equal(dtypes.unpack(run, wd.bits, 32), lane_codes)


def test_quantize_pads_n_to_whole_atoms():
    w = np.random.default_rng(2).standard_normal((128, 40))
    qw = quantize(w, "int4", 64, format=FRAGMENTS)
    assert padded_n(40) == 64 and qw.scales.shape == (2, 64) and qw.packed.shape == (4, 64 * 16)
    ref = quantize(w, "int4", 64)
    assert np.array_equal(qw.dequantize(), ref.dequantize())


# ---- the kernel in the interpreter ------------------------------------------------------------

GUARD = 64  # NaN elements after y: a store past its M x N elements would overwrite them


def _interpret(x, qw, s: Schedule) -> np.ndarray:
    """y = x @ W by the kernel(s) schedule `s` selects, launched as `kernels.matmul`
    launches them, into y's M * N elements followed by `GUARD` NaNs that must stay."""
    K, N = qw.shape
    M = x.shape[0]
    zeros = qw.zeros if qw.zeros is not None else qw.scales
    weights = dict(wdtype=qw.dtype, group_size=qw.group_size, has_zeros=qw.zeros is not None)
    constants = weights | s.constants()
    buffer = np.full(M * N + GUARD, np.nan, np.float16)
    y = buffer[:M * N]  # (the kernels view it as [M, N])
    if s.wgmma:  # as `kernels.matmul` launches them
        constants["wide_stores"] = N % 8 == 0
    if s.dequant:  # W^T [Np, K] dequantized, then the matmul of x by it
        wt = np.full((qw.scales.shape[1], K), np.nan, np.float16)
        dequantize_kernel("f16").interpret(qw.packed, qw.scales, zeros, wt, N, K, **weights,
                                           bk=k_tile(qw.group_size))
        schedule_kernel(s).interpret(x, wt, y, M, N, K, **s.constants(),
                                     wide_stores=N % 8 == 0)
    elif s.staged:
        schedule_kernel(s).interpret(x, qw.packed, qw.scales, zeros, y, M, N, K,
                                     **constants)
    else:
        floats, tiles = splitk_sizes(M, N, s.bm, s.block_columns, s.split_k)
        ws = np.full(floats, np.nan, np.float32)
        counters = np.zeros(tiles, np.int32)
        schedule_kernel(s).interpret(x, qw.packed, qw.scales, zeros, y, ws, counters, M, N,
                                     K, **constants)
        assert not counters.any()  # left at zero for the next call
    assert np.isnan(buffer[M * N:]).all()  # nothing stored past y's M x N
    return y.reshape(M, N)


@pytest.mark.parametrize("wdtype, zeros, s, M, N", [
    ("int4", False, Schedule(), 3, 64),
    ("int3", False, Schedule(bk=64, x_shared=False), 1, 72),
    ("uint4", True, Schedule(num_warps=2), 17, 64),
    ("f6e3m2", False, Schedule(bm=32, x_shared=False), 33, 32),
    ("int5", False, Schedule(split_k=2, prefetch=2, x_shared=False), 5, 40),
    ("f8e4m3", False, Schedule(split_k=4), 2, 96),
    ("int4", False, Schedule(bm=8, swap_ab=True, prefetch=3, unroll=2), 3, 64),
    ("uint2", True, Schedule(bm=8, swap_ab=True, num_warps=2, split_k=2, prefetch=3,
                             unroll=2), 9, 72),
    ("f6e3m2", False, Schedule(bm=16, swap_ab=True, prefetch=2, x_shared=False), 17, 40),
    ("int2", False, Schedule(bm=8, swap_ab=True, x_shared=False, prefetch=4, split_k=2), 1,
     32),
    # 8 groups in 3 splits (3, 3, 2 groups), and 8 groups in 8 splits of one each
    ("int4", False, Schedule(bm=8, swap_ab=True, num_warps=2, split_k=3), 2, 64),
    ("uint4", True, Schedule(num_warps=2, split_k=8, x_shared=False), 5, 40),
    ("int4", False, staged(32, 32, 4, 2, 3), 40, 72),  # 2 x 2 warps, ragged M and N
    ("uint3", True, staged(64, 64, 4, 2, 2), 17, 64),
    ("f6e3m2", False, staged(32, 32, 2, 1, 4), 33, 96),
    ("int8", False, staged(48, 32, 3, 3, 5), 50, 104),  # K = 512: not whole 5-tile rounds
    ("int4", False, wgmma(32, 4, 2, 128), 40, 200),  # wgmma: ragged M and N
    ("uint3", True, wgmma(16, 4, 3, 64), 17, 64),  # 64-byte rows of x (bk = 32)
    ("f6e3m2", False, wgmma(8, 8, 5, 128), 9, 264),  # two warpgroups, K = 512 in 5s
    # x two k-tiles ahead of four stages (the wgmmas of one k-tile in flight across the
    # next barrier), and one ahead of three with zero points
    ("int3", False, wgmma(32, 4, 4, 64, lead=2), 40, 96),
    ("uint4", True, wgmma(16, 8, 3, 128, lead=1), 17, 264),
    # the converted weights shared by the warpgroups through shared memory
    ("int4", False, wgmma(64, 8, 4, 128, lead=2, shared_weights=True), 70, 200),
    ("uint3", True, wgmma(32, 8, 3, 64, lead=1, shared_weights=True), 17, 264),  # bk 32
    ("f6e3m2", False, wgmma(16, 4, 5, 128, lead=3, shared_weights=True), 9, 72),
    # the codes several k-tiles ahead (in flight across the loop's back edge, and past K)
    ("uint4", True, wgmma(32, 4, 4, 64, lead=2, prefetch=2), 40, 96),
    ("f6e3m2", False, wgmma(16, 4, 2, 128, prefetch=3), 9, 264),
    ("int3", False, wgmma(64, 8, 4, 128, lead=2, prefetch=3, shared_weights=True), 70, 200),
    ("uint4", True, wgmma(32, 8, 3, 64, lead=1, prefetch=4, shared_weights=True), 17, 264),
    # a loop iteration's codes fetched at once (prefetch == stages), with zero points
    ("uint4", True, wgmma(64, 8, 4, 128, lead=2, prefetch=4, shared_weights=True), 70, 200),
    ("f6e3m2", False, wgmma(32, 8, 3, 64, lead=1, prefetch=3, shared_weights=True), 9, 72),
    # a converting producer warpgroup: the scales read ahead from global memory with the
    # codes, the weights converted stages - 1 k-tiles ahead (past K at the end)
    ("uint4", True, wgmma(64, 8, 4, 128, lead=2, prefetch=2, shared_weights=True,
                          producer=136), 70, 200),
    ("f6e3m2", False, wgmma(32, 8, 3, 128, lead=1, shared_weights=True, producer=120), 9,
     72),
    # half atoms (8-bit codes): 16 columns a warp, its half of each lane's bytes; ragged
    # N (a last tile of 8 columns), zero points with 32-row k-tiles, an 8-bit float
    ("int8", False, wgmma(32, 8, 4, 128, lead=2, prefetch=2, half_atoms=True), 40, 264),
    ("uint8", True, wgmma(16, 4, 3, 64, lead=1, half_atoms=True), 17, 72),
    ("f8e4m3", False, wgmma(8, 8, 2, 128, prefetch=3, half_atoms=True), 9, 200),
    ("int4", False, wgmma(32, 8, 4, 128, lead=2, prefetch=2, half_atoms=True), 40, 264),
    ("f6e3m2", False, wgmma(16, 4, 3, 64, lead=1, half_atoms=True), 17, 72),
    ("uint6", True, wgmma(8, 8, 2, 128, prefetch=3, half_atoms=True), 9, 200),
    ("uint2", True, wgmma(32, 8, 4, 128, lead=2, prefetch=2, half_atoms=True), 33, 136),
    # the register-A kernel with K split: 4 loop iterations of 128 rows in 2 blocks, in 3
    # (1, 1, 2), and in 4 with half atoms and zero points (each block parks its partial
    # sums, the last adds them and stores y)
    ("int4", False, wgmma(32, 4, 4, 64, lead=2, prefetch=2, split_k=2), 40, 200),
    ("f6e3m2", False, wgmma(16, 4, 4, 64, lead=2, prefetch=2, split_k=3), 17, 72),
    ("uint6", True, wgmma(16, 8, 4, 64, lead=2, prefetch=2, half_atoms=True, split_k=4),
     33, 136),
    # the codes four k-tiles ahead of four stages (`MIDDLE_TILES`' deep half atoms), and
    # eight and six (`REGISTER_A_AHEAD`: a split's look-ahead runs into the next split's
    # rows and past K)
    ("int4", False, wgmma(32, 4, 4, 64, lead=2, prefetch=4, half_atoms=True, split_k=2),
     40, 200),
    ("int4", False, wgmma(32, 4, 4, 64, lead=2, prefetch=8, half_atoms=True, split_k=2),
     40, 200),
    ("uint6", True, wgmma(16, 4, 4, 64, lead=2, prefetch=6, half_atoms=True), 17, 72),
    # a tile's splits as one cluster: the first adds the others' parts from their shared
    # memory (2 splits; 4 of 1 iteration each with half atoms and zero points)
    ("int4", False, wgmma(32, 4, 4, 64, lead=2, prefetch=2, split_k=2, split_cluster=True),
     40, 200),
    ("uint6", True, wgmma(16, 8, 4, 64, lead=2, prefetch=2, half_atoms=True, split_k=4,
                          split_cluster=True), 33, 136),
    # clusters of 2 and 4 column tiles sharing x's copies (a producer warp multicasts
    # them): 3 column tiles in 2 clusters of 2, and in one of 4 with zero points (the
    # last block wholly past N)
    ("int4", False, wgmma(32, 4, 4, 64, lead=2, prefetch=2, half_atoms=True, cluster_n=2),
     40, 136),
    ("uint3", True, wgmma(16, 4, 3, 64, lead=1, cluster_n=4), 17, 264),
    # the shared-weights kernel with K split: 2 iterations of 256 rows in 2 blocks (a
    # loop iteration's codes at once), 4 of 128 rows in 3 (1, 1, 2) with zero points and
    # 32-row k-tiles (256 columns a block)
    ("int4", False, wgmma(64, 8, 4, 128, lead=2, prefetch=4, shared_weights=True,
                          split_k=2), 70, 200),
    ("uint3", True, wgmma(32, 8, 4, 64, lead=1, shared_weights=True, split_k=3), 17, 264),
    # the shared-weights kernel's column tiles sharing x: 3 tiles of 128 columns in 2
    # clusters of 2 with zero points, 2 in one cluster of 4 (2 blocks wholly past N)
    ("uint3", True, wgmma(32, 8, 4, 64, lead=1, shared_weights=True, cluster_n=2), 17, 264),
    ("int4", False, wgmma(64, 8, 4, 64, lead=2, prefetch=4, shared_weights=True,
                          cluster_n=4), 70, 200),
])
def test_kernel_matches_float64_in_the_interpreter(wdtype, zeros, s, M, N):
    K, g = 512, 64
    x, qw, ref = qmm_problem(wdtype, M, N, K, g, zeros)
    y = _interpret(x, qw, s)
    assert np.abs(y.astype(np.float64) - ref).max() <= qmm_tolerance(x, qw, ref)


@pytest.mark.parametrize("regs, width", [(64, 4), (6, 2), (3, 1)])
def test_split_k_workspace_puts_a_warps_16_byte_runs_side_by_side(regs, width):
    """Split-K's workspace (`workspace_order`): register r of thread t is element
    (r // width, t, r % width) of `[vectors, threads, width]`, so that one vector
    access of a warp covers 32 adjacent runs of `width` floats."""
    acc = SimpleNamespace(layout=spatial(128).local(regs))
    shape, order = workspace_order(acc)
    assert shape == [regs // width, 128, width]
    assert order.num_threads == 128 and order.local_size == regs
    for t in (0, 1, 31, 127):
        for r in range(regs):
            assert order.global_index(t, r) == (0, 0, r // width, t, r % width)


@pytest.mark.parametrize("wdtype, zeros, s, M, N, K", [
    # K = 512: two iterations of four pairs of 64-row k-tiles; ragged M and N
    ("int4", False, wgmma(32, 8, 4, 128, lead=2, prefetch=2, half_atoms=True, pair_k=True),
     40, 200, 512),
    # zero points, a 6-bit type, codes four pairs ahead
    ("uint6", True, wgmma(16, 8, 4, 128, lead=2, prefetch=4, half_atoms=True, pair_k=True),
     17, 136, 512),
    # K = 640: 1.25 iterations (the last iteration's pairs past K read zeros), a last
    # tile of 8 columns
    ("int4", False, wgmma(16, 8, 4, 128, lead=2, prefetch=2, half_atoms=True, pair_k=True),
     9, 72, 640),
    # groups of 64: pairs of 32-row k-tiles
    ("int8", False, wgmma(16, 8, 4, 64, lead=2, prefetch=2, half_atoms=True, pair_k=True),
     9, 72, 320),
    # with K split in two and in three (1, 1, 2 iterations): the parts of the pair sums
    ("int4", False, wgmma(32, 8, 4, 128, lead=2, prefetch=4, half_atoms=True, pair_k=True,
                          split_k=2), 40, 200, 1024),
    ("uint4", True, wgmma(16, 8, 4, 128, lead=2, prefetch=2, half_atoms=True, pair_k=True,
                          split_k=3), 17, 72, 2048),
    # whole atoms (any width, odd ones too): 128-column tiles
    ("int3", False, wgmma(32, 8, 4, 128, lead=2, prefetch=2, pair_k=True), 40, 200, 512),
    ("uint5", True, wgmma(16, 8, 4, 128, lead=2, prefetch=4, pair_k=True), 17, 136, 640),
    ("int3", False, wgmma(16, 8, 4, 128, lead=2, prefetch=2, pair_k=True, split_k=2),
     9, 72, 1024)])
def test_wgmma_pair_k_in_the_interpreter(wdtype, zeros, s, M, N, K):
    """Two warpgroups on the two k-tiles of each pair of one tile (`pair_k`; 64 columns
    of half atoms or 128 of whole ones), their sums added at the end."""
    x, qw, ref = qmm_problem(wdtype, M, N, K, 2 * s.bk if s.bk == 32 else 128, zeros,
                             seed=2)
    y = _interpret(x, qw, s)
    assert np.abs(y.astype(np.float64) - ref).max() <= qmm_tolerance(x, qw, ref)


def test_pair_k_is_two_warpgroups():
    with pytest.raises(ValueError, match="pair_k .* with 8 warps"):
        wgmma(64, 4, 4, 128, half_atoms=True, pair_k=True)
    whole = wgmma(64, 8, 4, 128, lead=2, prefetch=2, pair_k=True)  # (odd widths too)
    assert whole.block_columns == 128 and whole.fits(4096, 128)
    with pytest.raises(ValueError, match="pair_k"):
        wgmma(64, 8, 4, 128, half_atoms=True, pair_k=True, split_k=2, split_cluster=True)
    s = wgmma(64, 8, 4, 128, lead=2, prefetch=4, half_atoms=True, pair_k=True)
    assert s.block_columns == 64 and s.constants()["pair_k"] is True
    assert str(s).endswith(" pair_k") and s.fits(4096, 128)
    # a pair of k-tiles must lie in one group of scales: 32-row k-tiles for groups of 64
    assert wgmma(64, 8, 4, 64, lead=2, half_atoms=True, pair_k=True).fits(4096, 64)
    s64 = Schedule(64, 64, 8, wgmma=True, stages=4, lead=2, half_atoms=True, pair_k=True)
    assert not s64.fits(4096, 64)
    with pytest.raises(VMError, match="pairs of k-tiles within a group .128 rows dividing "
                                      "64.") as info:
        schedule_kernel(s64).specialize(wdtype=dtypes.parse("int4"), group_size=64,
                                        **s64.constants())
    assert info.value.loc is not None and info.value.loc.file.endswith("qmm_wgmma.py")
    assert not wgmma(8, 8, 4, 128, lead=2, half_atoms=True, pair_k=True).fits(4096, 128)


def test_wgmma_split_k_past_whole_iterations_in_the_interpreter():
    """K = 576: 4.5 iterations of 128 rows; the last of 3 splits (1, 1, 2 iterations and
    a half) runs past K, where the copies read zeros and the codes' loads nothing."""
    s = wgmma(16, 4, 4, 64, lead=2, prefetch=2, split_k=3)
    x, qw, ref = qmm_problem("int3", 9, 40, 576, 64, False, seed=1)
    y = _interpret(x, qw, s)
    assert np.abs(y.astype(np.float64) - ref).max() <= qmm_tolerance(x, qw, ref)


# ---- any N, K = 3 groups -----------------------------------------------------------------------

ACCEPTANCE_N = (1, 7, 100, 4100, 12289)  # issue 43: N the format pads, the kernels mask


def kernel_family(s: Schedule) -> str:
    """The kernel a schedule runs and which of its code paths (those that differ in how
    the edges of K and N are handled: split-K, x through shared memory or not, W as the
    mma A operand, half atoms, the k-tiles of a loop iteration)."""
    if s.dequant or s.staged:
        return "dequant" if s.dequant else "staged"
    if s.wgmma:
        return "wgmma" + " shared_weights" * s.shared_weights + " half_atoms" * s.half_atoms \
            + " split_k" * (s.split_k > 1)
    return "streaming" + " swap_ab" * s.swap_ab + " x_global" * (not s.x_shared) \
        + " split_k" * (s.split_k > 1) + " unroll" * (s.unroll > 1)


def tuner_families(N: int, K: int, g: int, bits: int) -> dict[str, Schedule]:
    """One schedule of each kernel family that the tuner can pick for N x K weights of
    `bits`-bit codes in groups of g (the first of its candidates, over every M bucket, on
    Hopper and elsewhere)."""
    found: dict[str, Schedule] = {}
    for hopper in (False, True):
        for M in (*matmul.M_BUCKETS, 8192):
            for s in candidates(M, N, K, g, hopper=hopper, bits=bits):
                found.setdefault(kernel_family(s), s)
    return found


def _families_by_smallest_group(bits: int, groups: tuple[int, ...]) -> list[tuple[int, Schedule]]:
    """(g, schedule) for each family of `tuner_families` at K = 3g, at its smallest g."""
    found: dict[str, tuple[int, Schedule]] = {}
    for g in sorted(groups):
        for family, s in tuner_families(100, 3 * g, g, bits).items():
            found.setdefault(family, (g, s))
    return sorted(found.values(), key=lambda gs: kernel_family(gs[1]))


INTERPRETED_FAMILIES = _families_by_smallest_group(4, (32, 64, 128))


def test_every_family_is_interpreted():
    """The families of the test below are those the tuner picks from: the streaming kernel
    (x through shared memory or not, swapped, split-K), the staged one, and on Hopper the
    wgmma kernel (half atoms, split-K where K allows it), shared weights, the dequantize
    pair."""
    families = {kernel_family(s) for _, s in INTERPRETED_FAMILIES}
    assert {"streaming", "streaming x_global", "streaming swap_ab", "streaming split_k",
            "staged", "wgmma", "wgmma half_atoms", "wgmma shared_weights",
            "dequant"} <= families


@pytest.mark.parametrize("g, s", INTERPRETED_FAMILIES,
                         ids=[f"g{g}-{kernel_family(s)}".replace(" ", "-")
                              for g, s in INTERPRETED_FAMILIES])
def test_ragged_n_and_three_groups_of_k_in_the_interpreter(g, s):
    """N = 7 and 100 (not a multiple of 8: a block's columns past N are neither read past
    the padded weights nor stored) and K = 3 groups, for each family the tuner can pick,
    the schedule as `candidates` gives it."""
    for wdtype, zeros, M, N in (("uint4", True, 3, 7), ("int4", False, 2, 100)):
        x, qw, ref = qmm_problem(wdtype, M, N, 3 * g, g, zeros, seed=N)
        y = _interpret(x, qw, s)
        assert np.abs(y.astype(np.float64) - ref).max() <= qmm_tolerance(x, qw, ref), str(s)


# ---- compiled for the GPU (CPU) ---------------------------------------------------------------

def _default_program(wdtype: str, M: int):
    """The kernel and schedule `quantized_matmul` picks for M rows of a 4096 x 12288 layer
    (M = 1, 16: the streaming kernel's two decode tilings; M = 4096: the staged kernel)."""
    s = default_schedule(M, 12288, 4096, 128)
    kernel = qmm_staged_kernel("f16") if s.staged else qmm_kernel("f16")
    return s, kernel.specialize(wdtype=dtypes.parse(wdtype), group_size=128, **s.constants())


@pytest.mark.parametrize("M", [1, 16, 4096])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("wdtype", BENCH_TYPES)
def test_every_weight_type_compiles_without_spills(wdtype, arch, M):
    s, program = _default_program(wdtype, M)
    # (each arch's own PTX: sm_90's waits for the previous kernel, `griddepcontrol`,
    # which LLVM orders loads around)
    ptx = compile_once(program, arch).ptx
    report = ptxas_report(ptx, arch)[program.name]
    assert max(report.spill_stores, report.spill_loads) <= SPILL_SLACK, str(report)
    assert "mma.sync.aligned.m16n8k16" in ptx and "ldmatrix" in ptx
    assert s.staged == (M == 4096)
    if s.staged:  # every operand through shared memory, in 16-byte copies
        assert "cp.async.cg.shared.global" in ptx
        # (the conversion's bias constants are read once from a module global)
        assert not [line for line in ptx.splitlines()
                    if "ld.global" in line and "tilevm_opaque_" not in line]
    elif dtypes.parse(wdtype).bits in (4, 8):
        assert "ld.global.v4" in ptx  # 16 bytes of codes per lane
    # Each converted pair (and each pair scaled) is one mma register: no two halves of
    # different registers are packed together (ptxas would `prmt` them); a scale's
    # broadcast {s, s} is the only packing left.
    packed = re.findall(r"mov\.b32\s+%r\d+, \{(%rs\d+), (%rs\d+)\}", ptx)
    assert all(lo == hi for lo, hi in packed), packed[:4]


# ---- schedules and the tuning table -------------------------------------------------------------

@pytest.mark.parametrize("M, N, K, g", [(1, 12288, 4096, 128), (16, 4096, 14336, 128),
                                        (4096, 4096, 4096, 64), (17, 200, 4096, 32),
                                        (1, 8192, 28672, 128), (5, 64, 96, 96)])
def test_schedules_fit_the_problem(M, N, K, g):
    found = candidates(M, N, K, g)
    assert found and all(s.fits(K, g) for s in found)
    assert default_schedule(M, N, K, g).fits(K, g)
    # x as the mma A operand pads M to 16-row tiles; swapped (x^T as B) to 8 rows
    assert all(s.bm % 16 == 0 for s in found if not s.swap_ab)
    assert all(s.bm in (8, 16) and M <= 16 for s in found if s.swap_ab)
    assert len(found) <= 20  # the first call compiles and times each (<= 20 s in all)


def test_splits_take_whole_chunks_of_unroll_groups_and_stages_are_even():
    # K = 1024, g = 64: 16 groups, 8 chunks of unroll = 2 groups; a split takes whole
    # chunks, as many as it gets (6 chunks in 4 splits: 1, 2, 1, 2)
    assert Schedule(unroll=2, split_k=4).fits(1024, 64)
    assert Schedule(unroll=2, split_k=4).fits(1024 - 64 * 4, 64)
    assert not Schedule(unroll=2, split_k=16).fits(1024, 64)  # more splits than chunks
    assert not Schedule(unroll=2).fits(1024 - 64, 64)  # 15 groups: no whole chunks
    # one 64-row k-tile per group: the two activation stages need unroll 2
    assert not Schedule(bk=64).fits(1024, 64)
    assert Schedule(bk=64, unroll=2).fits(1024, 64)
    # deepen: three k-tiles in flight, 4 per loop iteration, when the problem allows it
    s = Schedule(bm=8, bk=64, num_warps=2, split_k=4, swap_ab=True)
    assert tilings.deepen(s, 4096, 128) == Schedule(bm=8, bk=64, num_warps=2, split_k=4,
                                                      swap_ab=True, prefetch=3, unroll=2)
    assert tilings.deepen(s, 4096 + 128, 128) == s  # 33 groups: no whole chunks of 2
    # the default fetches one k-tile ahead (the deeper pipeline is the tuner's to try)
    assert default_schedule(1, 12288, 4096, 128).prefetch == 1
    assert default_schedule(16, 12288, 4096, 128).prefetch == 1


def test_the_kernel_rejects_odd_stages_with_its_reason():
    from tilevm.ir.errors import VMError

    with pytest.raises(VMError, match="even number of k-tiles"):
        qmm_kernel("f16").specialize(wdtype=dtypes.parse("int4"), group_size=64, bk=64)


def test_default_schedule_fills_the_gpu_with_split_k():
    s = default_schedule(1, 4096, 4096, 128, sms=132)  # up to 16 splits
    assert s.split_k == 16 and (4096 // (32 * s.num_warps)) * 8 < 4 * 132
    s = default_schedule(1, 12288, 4096, 128, sms=132)  # 96 blocks of 4 warps: 8 splits
    blocks = 12288 // (32 * s.num_warps)
    assert blocks * s.split_k >= 4 * 132 > blocks * s.split_k // 2
    # up to 8 rows 4 warps; a wide layer splits K in two to make 4 blocks per SM
    s = default_schedule(1, 57344, 8192, 128, sms=132)
    assert (s.num_warps, s.split_k, s.prefetch) == (4, 2, 1)
    assert default_schedule(1, 57344, 8192, 128, sms=100).split_k == 1


def test_m_buckets():
    assert [matmul.m_bucket(m) for m in (1, 2, 8, 9, 16, 17, 4096, 5000)] == \
        [8, 8, 8, 16, 16, 64, 4096, 8192]


def test_schedule_module_names_its_space():
    assert Schedule().constants() == {"bm": 16, "bk": 32, "num_warps": 1,
                                               "split_k": 1, "x_shared": True,
                                               "prefetch": 1, "swap_ab": False,
                                               "unroll": 1}
    assert staged(128, 64, 8, 2, 3).constants() == {"bm": 128, "bk": 64, "num_warps": 8,
                                                    "warps_m": 2, "stages": 3}
    with pytest.raises(ValueError, match="staged"):
        Schedule(bm=128, staged=True, split_k=2)
    with pytest.raises(ValueError, match="warps_m"):
        Schedule(warps_m=2)
    # the kernels' keyword constants are exactly the schedule's
    import inspect

    for s, kernel in ((Schedule(), qmm_kernel("f16")), (staged(64, 32, 4, 1, 4),
                                                        qmm_staged_kernel("f16"))):
        names = {p.name for p in inspect.signature(kernel.fn).parameters.values()
                 if p.kind is p.KEYWORD_ONLY}
        assert set(s.constants()) == names - {"wdtype", "group_size", "has_zeros"}


# ---- on the GPU ------------------------------------------------------------------------------

def _gpu_case(wdtype: str, act: str, M: int, N: int, K: int, g: int, zeros: bool,
              s: Schedule | None = None):
    import torch

    from tilevm.kernels import quantized_matmul

    torch.manual_seed(zlib.crc32(f"{wdtype} {act} {M} {N}".encode()))  # (not `hash`:
    # a str's is salted per process, so a failure would not repeat)
    tdt = torch.float16 if act == "f16" else torch.bfloat16
    w = torch.randn(K, N, device="cuda")
    qw = quantize(w.to(tdt), wdtype, g, zero_point=zeros, format=FRAGMENTS)
    x = torch.randn(M, K, device="cuda").to(tdt)
    y = quantized_matmul(x, qw, schedule=s, tune=False)
    buffer = torch.full((M * N + GUARD,), float("nan"), dtype=tdt, device="cuda")
    quantized_matmul(x, qw, schedule=s, tune=False, out=buffer[:M * N].view(M, N))
    assert torch.isnan(buffer[M * N:]).all()  # nothing stored past y's M x N
    assert torch.equal(buffer[:M * N].view(M, N), y)  # (deterministic: split-K too)
    ref = x.double() @ qw.dequantize().double()
    wq = qw.dequantize().to(tdt).double()  # the kernel rounds each weight to `act` once
    bound = (2.0 ** -7 if act == "bf16" else 2.0 ** -10) * (
        ref.abs().max() + (x.double().abs() @ wq.abs()).max() / 4)
    err = (y.double() - ref).abs().max()
    assert y.shape == (M, N) and y.dtype == tdt
    assert torch.isfinite(y).all() and err <= bound, (float(err), float(bound))


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["f16", "bf16"])
@pytest.mark.parametrize("wdtype", BENCH_TYPES)
def test_gpu_every_weight_type_matches_float64(wdtype, act):
    g = 128 if wdtype in ("int4", "uint4") else 64
    _gpu_case(wdtype, act, 17, 200, 1024, g, False)  # ragged M and N
    _gpu_case(wdtype, act, 1, 256, 2048, g, False)
    _gpu_case(wdtype, act, 130, 200, 1024, g, False)  # the staged kernel (M >= 128)




@pytest.mark.gpu
@pytest.mark.parametrize("s", [Schedule(split_k=4), Schedule(num_warps=4, bk=64),
                               Schedule(bm=8, swap_ab=True, num_warps=2, split_k=3),  # uneven
                               Schedule(bm=64, x_shared=False), Schedule(bm=32, prefetch=3),
                               Schedule(bm=8, swap_ab=True, split_k=4, prefetch=3),
                               Schedule(bm=16, bk=64, num_warps=4, swap_ab=True, prefetch=3,
                                        unroll=2),
                               Schedule(bm=8, swap_ab=True, x_shared=False, prefetch=2),
                               staged(128, 64, 8, 2, 2), staged(64, 32, 4, 1, 4),
                               staged(48, 32, 3, 3, 5), wgmma(128, 4, 2, 128),
                               wgmma(64, 8, 3, 128), wgmma(40, 4, 4, 32),
                               wgmma(128, 4, 4, 128, lead=2), wgmma(64, 8, 4, 64, lead=1),
                               wgmma(256, 8, 4, 128, lead=2, shared_weights=True),
                               wgmma(64, 8, 3, 64, lead=1, shared_weights=True),
                               wgmma(128, 4, 4, 128, lead=2, prefetch=2),
                               wgmma(256, 8, 4, 128, lead=2, prefetch=3,
                                     shared_weights=True),
                               wgmma(256, 8, 4, 128, lead=2, prefetch=4,
                                     shared_weights=True),
                               wgmma(256, 8, 4, 128, lead=2, prefetch=2, shared_weights=True,
                                     producer=136), dequant_schedule()])
def test_gpu_schedules_and_zero_points(s):
    if s.wgmma:
        require_sm90("the wgmma kernels")
    _gpu_case("uint4", "f16", 33, 4104 if s.bm == 16 else 96, 4096, 128, True, s)
    _gpu_case("int3", "bf16", 5, 96, 4096, 128, False, s)


@pytest.mark.gpu
@pytest.mark.parametrize("wdtype, act, zeros", [("int8", "bf16", False), ("uint8", "f16", True),
                                                ("f8e4m3", "f16", False),
                                                ("f8e5m2", "bf16", False),
                                                ("int4", "f16", False),
                                                ("f6e3m2", "bf16", False),
                                                ("uint6", "f16", True),
                                                ("int2", "bf16", False)])
def test_gpu_half_atoms(wdtype, act, zeros):
    """The wgmma kernel with half atoms (codes of an even width), its tuned tiling and a
    small one with 32-row k-tiles: ragged M and N (a last column tile of 8), K past whole
    iterations."""
    require_sm90("the wgmma kernels")
    _gpu_case(wdtype, act, 300, 264, 1088, 64, zeros,
              wgmma(256, 8, 4, 64, lead=2, prefetch=2, half_atoms=True))
    _gpu_case(wdtype, act, 520, 200, 4224, 128, zeros,
              wgmma_tile(WGMMA_HALF_ATOM_TILES[0], 128, half_atoms=True))
    _gpu_case(wdtype, act, 33, 72, 1024, 64, zeros, wgmma(64, 4, 3, 64, lead=1,
                                                           half_atoms=True))


@pytest.mark.gpu
@pytest.mark.parametrize("wdtype, act, zeros, s", [
    ("int4", "f16", False, wgmma(64, 4, 4, 128, lead=2, prefetch=2, split_k=4)),
    ("int3", "bf16", False, wgmma(64, 4, 4, 128, lead=2, prefetch=2, split_k=3)),
    ("uint4", "f16", True, wgmma(64, 4, 4, 128, lead=2, prefetch=2, split_k=8)),
    ("f6e3m2", "bf16", False, wgmma(128, 8, 4, 128, lead=2, prefetch=2, half_atoms=True,
                                    split_k=2)),
    ("uint8", "f16", True, wgmma(64, 8, 4, 128, lead=2, prefetch=2, half_atoms=True,
                                 split_k=4)),
    # the wide tilings, 128 partial sums a thread
    ("int2", "bf16", False, wgmma(256, 8, 4, 128, lead=2, prefetch=2, half_atoms=True,
                                  split_k=2)),
    ("uint3", "f16", True, wgmma(128, 4, 4, 128, lead=2, prefetch=2, split_k=2)),
    # one warpgroup of half atoms: 64 columns a block
    ("f6e3m2", "f16", False, wgmma(256, 4, 4, 128, lead=2, prefetch=2, half_atoms=True,
                                   split_k=2)),
    ("int4", "bf16", False, wgmma(64, 4, 4, 128, lead=2, prefetch=2, half_atoms=True,
                                  split_k=4)),
    # the shared-weights kernel: 256 x 128, a loop iteration's codes at once
    ("int4", "f16", False, wgmma(256, 8, 4, 128, lead=2, prefetch=4, shared_weights=True,
                                 split_k=2)),
    ("uint4", "bf16", True, wgmma(256, 8, 4, 128, lead=2, prefetch=4, shared_weights=True,
                                  split_k=3)),
    ("f6e3m2", "f16", False, wgmma(128, 8, 4, 128, lead=2, prefetch=2, shared_weights=True,
                                   split_k=4))])
def test_gpu_wgmma_split_k(wdtype, act, zeros, s):
    """The wgmma kernels with K split: ragged M and N, K past whole iterations (16.5 of
    256 rows); the second call finds the tile counters back at zero."""
    require_sm90("the wgmma kernels")
    _gpu_case(wdtype, act, 100, 200, 4096, 128, zeros, s)
    _gpu_case(wdtype, act, 33, 264, 4224, 128, zeros, s)


@pytest.mark.gpu
@pytest.mark.parametrize("wdtype, act, zeros, s", [
    # two warpgroups on the two k-tiles of each pair of one tile (pair_k; pairs past K)
    ("int4", "f16", False, wgmma(64, 8, 4, 128, lead=2, prefetch=4, half_atoms=True,
                                 pair_k=True)),
    ("uint4", "bf16", True, wgmma(32, 8, 4, 128, lead=2, prefetch=2, half_atoms=True,
                                  pair_k=True)),
    ("f6e3m2", "f16", False, wgmma(128, 8, 4, 128, lead=2, prefetch=4, half_atoms=True,
                                   pair_k=True)),
    ("int8", "bf16", False, wgmma(64, 8, 4, 128, lead=2, prefetch=2, half_atoms=True,
                                  pair_k=True)),
    ("int3", "f16", False, wgmma(64, 8, 4, 128, lead=2, prefetch=2, pair_k=True)),
    # the odd widths' candidate from 65 rows: whole-atom pairs of 128 rows, K split in two
    ("uint3", "bf16", True, wgmma(128, 8, 4, 128, lead=2, prefetch=2, pair_k=True,
                                  split_k=2)),
    ("int4", "f16", False, wgmma(64, 8, 4, 128, lead=2, prefetch=4, half_atoms=True,
                                 pair_k=True, split_k=2)),
    # a tile's K splits as one cluster adding their parts through distributed shared
    # memory (split_cluster; the last split short)
    ("int4", "f16", False, wgmma(64, 4, 4, 128, lead=2, prefetch=2, split_k=2,
                                 split_cluster=True)),
    ("int4", "bf16", False, wgmma(64, 4, 4, 128, lead=2, prefetch=4, half_atoms=True,
                                  split_k=4, split_cluster=True)),
    ("uint3", "f16", True, wgmma(32, 4, 4, 128, lead=2, prefetch=2, split_k=8,
                                 split_cluster=True)),
    ("f6e3m2", "bf16", False, wgmma(128, 4, 4, 128, lead=2, prefetch=4, half_atoms=True,
                                    split_k=2, split_cluster=True)),
    # clusters of column tiles whose x tiles a producer warp multicasts (cluster_n; a
    # cluster reaching past N)
    ("int4", "f16", False, wgmma(64, 4, 4, 128, lead=2, prefetch=4, half_atoms=True,
                                 cluster_n=2)),
    ("uint3", "bf16", True, wgmma(128, 4, 4, 128, lead=2, prefetch=2, cluster_n=4)),
    ("f6e3m2", "f16", False, wgmma(64, 4, 4, 128, lead=2, prefetch=8, half_atoms=True,
                                   cluster_n=4)),
    ("uint4", "bf16", True, wgmma(256, 8, 4, 128, lead=2, prefetch=4, shared_weights=True,
                                  cluster_n=2))])
def test_gpu_wgmma_work_shared_in_a_block_or_a_cluster(wdtype, act, zeros, s):
    """Work shared inside a block (pair_k: K) or a cluster (split_cluster: K; cluster_n:
    x's copies): ragged M and N, K past whole iterations (16.5 of 256 rows); repeated
    calls bitwise equal (the parts are added in order)."""
    require_sm90("the wgmma kernels")
    _gpu_case(wdtype, act, 100, 200, 4224, 128, zeros, s)
    _gpu_case(wdtype, act, 33, 4104, 8192, 128, zeros, s)


@pytest.mark.gpu
@pytest.mark.parametrize("wdtype, act, zeros, s", [
    ("int4", "f16", False, wgmma(64, 4, 4, 128, lead=2, prefetch=2, stream_k=1)),
    ("int4", "bf16", False, wgmma(64, 4, 4, 128, lead=2, prefetch=4, half_atoms=True,
                                  stream_k=2)),
    ("uint3", "f16", True, wgmma(32, 4, 4, 128, lead=2, prefetch=2, stream_k=2)),
    ("f6e3m2", "f16", False, wgmma(128, 4, 4, 128, lead=2, prefetch=4, half_atoms=True,
                                   stream_k=1)),
    ("uint8", "bf16", True, wgmma(64, 4, 3, 128, lead=1, prefetch=2, half_atoms=True,
                                  stream_k=3))])
def test_gpu_wgmma_stream_k(wdtype, act, zeros, s):
    """The stream-K kernel: ragged M and N, K past whole units (16.5 of 256 rows), tiles
    shared by two or three blocks; repeated calls bitwise equal (the parts are added in
    order) with the tile counters back at zero."""
    require_sm90("the wgmma kernels")
    _gpu_case(wdtype, act, 100, 200, 4224, 128, zeros, s)
    _gpu_case(wdtype, act, 33, 4104, 4096, 128, zeros, s)


def test_stream_k_is_the_register_a_wgmma_kernels_without_a_split():
    """`stream_k` selects `kernels.qmm_streamk` (constants without `split_k` or
    `wide_stores`; lead 0 is stages - 1) and is refused anywhere else; its codes run at
    most one unit ahead."""
    s = wgmma(64, 4, 4, 128, prefetch=2, stream_k=2)
    assert str(s) == "wgmma bm=64 bk=64 warps=4 stages=4 prefetch=2 stream_k=2"
    assert s.constants() == dict(bm=64, bk=64, num_warps=4, stages=4, lead=3, prefetch=2)
    assert matmul_launch.schedule_kernel(s).name == "qmm_streamk_f16" and s.splits_k_kernel
    assert s.fits(4096, 128) and not wgmma(64, 4, 2, 128, prefetch=3, stream_k=1).fits(
        4096, 128)
    for bad in (dict(split_k=2), dict(shared_weights=True)):
        with pytest.raises(ValueError, match="stream_k"):
            wgmma(64, 8, 4, 128, lead=2, stream_k=1, **bad)
    with pytest.raises(ValueError, match="stream_k"):
        Schedule(bm=16, stream_k=1)
    assert not any(c.stream_k for M in (1, 64, 256, 4096)
                   for c in candidates(M, 4096, 14336, 128, hopper=True, bits=4))


# Issue 43's acceptance: each (weights, group size, family the tuner can pick at K = 3g).
GPU_RAGGED = [(wdtype, act, zeros, g, s)
              for wdtype, act, zeros in (("int4", "f16", False), ("uint3", "bf16", True))
              for g in (32, 128)
              for s in tuner_families(ACCEPTANCE_N[-1], 3 * g, g,
                                      dtypes.parse(wdtype).bits).values()]


@pytest.mark.gpu
@pytest.mark.parametrize("wdtype, act, zeros, g, s", GPU_RAGGED,
                         ids=[f"{w}-g{g}-{kernel_family(s)}".replace(" ", "-")
                              for w, _, _, g, s in GPU_RAGGED])
def test_gpu_any_n_and_three_groups_of_k(wdtype, act, zeros, g, s):
    """N in `ACCEPTANCE_N` (1, 7, 100, 4100, 12289: none a multiple of 8), K = 3 groups,
    M = 1, 16, 64, for every kernel family the tuner can pick, each with the schedule its
    candidates give."""
    if s.wgmma:
        require_sm90("the wgmma kernels")
    for N in ACCEPTANCE_N:
        for M in (1, 16, 64):
            _gpu_case(wdtype, act, M, N, 3 * g, g, zeros, s)


@pytest.mark.gpu
def test_gpu_dequant_pair():
    """The dequantize-then-multiply pair with 32-row groups (its dequantization's 32-row
    k-tiles) and K past whole iterations of the matmul's loop (the copies read zeros)."""
    require_sm90("the wgmma kernels")
    _gpu_case("f6e3m2", "f16", 300, 200, 1088, 32, False, dequant_schedule())
    _gpu_case("int8", "bf16", 257, 136, 1024, 64, False, dequant_schedule())


@pytest.mark.gpu
def test_gpu_quantized_linear_and_tuning(tmp_path, monkeypatch):
    import torch

    from tilevm.kernels import QuantizedLinear

    monkeypatch.setenv("TILEVM_CACHE_DIR", str(tmp_path))
    matmul._memory.clear()
    linear = torch.nn.Linear(1024, 320, device="cuda", dtype=torch.float16)
    layer = QuantizedLinear.from_linear(linear, "int4", 128)
    x = torch.randn(2, 3, 1024, device="cuda", dtype=torch.float16)
    y = layer(x)  # tunes (first call), then the table has it
    ref = x.double() @ layer.qweight.dequantize().double() + linear.bias.double()
    assert y.shape == (2, 3, 320)
    assert (y.double() - ref).abs().max() <= 2.0 ** -8 * ref.abs().max() + 1e-2
    table = json.loads((tmp_path / "tuning.json").read_text())
    assert len(table) == 1 and next(iter(table.values()))["candidates"] >= 1
    matmul._memory.clear()
    assert torch.equal(layer(x), y)  # the schedule comes back from the table


@pytest.mark.gpu
def test_gpu_a_stored_ptx_order_runs_and_a_stale_one_is_ignored(tmp_path, monkeypatch):
    """A tuning table entry with a PTX order (as `vmc tune --qmm` stores a level-2
    winner): the library loads the kernel in that order, bitwise equal to the compiled
    order's; an order found on another text is ignored with a warning."""
    import random

    import torch

    from tilevm.kernels import quantized_matmul
    from tilevm.tune.cache import store
    from tilevm.tune.ptx_order import PtxOrder, ptx_digest
    from tilevm.tune.variants import compiled_ptx

    monkeypatch.setenv("TILEVM_CACHE_DIR", str(tmp_path))
    w = torch.randn(1024, 320, device="cuda")
    qw = quantize(w.half(), "int4", 128, format=FRAGMENTS)
    x = torch.randn(16, 1024, device="cuda", dtype=torch.float16)
    s = default_schedule(16, 320, 1024, 128, hopper=matmul_launch.is_hopper(x.device), bits=4)
    compiled = quantized_matmul(x, qw, schedule=s)
    ptx = compiled_ptx(matmul_launch.schedule_program(qw, s, 320))
    order = PtxOrder.parse(ptx)
    moved = order.moved([run.order(random.Random(3)) for run in order.runs])
    for of, warns in ((ptx_digest(ptx), False), ("0" * 16, True)):
        store(matmul.tuning_key(x, qw), {"schedule": asdict(s),
                                         "ptx_order": {"of": of, "runs": moved}})
        matmul._memory.clear()
        matmul._plans.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = quantized_matmul(x, qw)
        assert torch.equal(y, compiled)
        assert any("another compiled text" in str(c.message) for c in caught) == warns


@pytest.mark.gpu
def test_gpu_tuning_times_the_third_the_cost_model_ranks_fastest():
    import torch

    from tilevm.cost.hardware import gpu_for_device
    from tilevm.cost.model import Resources
    from tilevm.kernels import quantized_matmul
    from tilevm.tune.rank import fastest, predicted_seconds

    M, K, N = 16, 1024, 768
    qw = quantize(torch.randn(K, N, device="cuda"), "int4", 128, format=FRAGMENTS)
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    todo = tilings.candidates(M, N, K, 128, hopper=matmul_launch.is_hopper(x.device), bits=4)
    best, report = matmul.tune(x, qw, reps=3, ranked=True)
    assert report["candidates"] == len(todo)
    gpu = gpu_for_device(torch.cuda.get_device_name())
    if gpu is None:  # a GPU the model has no table for: every candidate timed
        assert report["timed"] == len(todo)
    else:  # the model's fastest third, computed here independently of the tuner
        launches = [[(p, {"M": M, "N": N, "K": K}, Resources.of(k))
                     for p, k in matmul_launch.schedule_launches(qw, s, N)] for s in todo]
        kept = [todo[i] for i in fastest(predicted_seconds(launches, gpu, workers=1), 1 / 3)]
        assert report["timed"] == len(kept) == max(1, len(todo) // 3)
        assert best in kept
    ref = x.double() @ qw.dequantize().double()
    y = quantized_matmul(x, qw, schedule=best)
    assert (y.double() - ref).abs().max() <= 2.0 ** -8 * ref.abs().max() + 1e-2
    _, everything = matmul.tune(x, qw, reps=3)  # (the default: every candidate)
    assert everything["timed"] == everything["candidates"] == len(todo)


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_bad_input_is_rejected_before_any_launch():
    import torch

    from tilevm.kernels import quantized_matmul

    qw = quantize(torch.randn(256, 64), "int4", 128, format=FRAGMENTS)
    with pytest.raises(TypeError, match="CUDA torch tensor"):
        quantized_matmul(torch.randn(1, 256, dtype=torch.float16), qw)
    qr = quantize(torch.randn(256, 64), "int4", 128)
    with pytest.raises((TypeError, ValueError)):
        quantized_matmul(np.zeros((1, 256), np.float16), qr)


def test_vmc_compiles_the_library_kernel(tmp_path, capsys):

    from tilevm.cli import main

    source = ROOT / "kernels" / "qmm.py"
    out = tmp_path / "qmm.ptx"
    assert main(["compile", f"{source}:qmm_f16", "--set", "wdtype=int3", "--set",
                 "group_size=64", "--arch", "sm_90", "-o", str(out)]) == 0
    ptx = out.read_text()
    assert ".entry qmm_f16" in ptx and "mma.sync.aligned.m16n8k16" in ptx
    assert main(["compile", str(source), "--arch", "sm_90", "-o", str(out)]) != 0
    assert "name one" in capsys.readouterr().err  # four kernels: the user picks one


def test_wgmma_schedules():
    s = wgmma(128, 4, 2, 128)
    assert s.constants() == {"bm": 128, "bk": 64, "num_warps": 4, "stages": 2, "lead": 0,
                             "prefetch": 1}
    assert str(s) == "wgmma bm=128 bk=64 warps=4 stages=2"
    assert str(wgmma(128, 4, 4, 128, lead=2)) == "wgmma bm=128 bk=64 warps=4 stages=4 lead=2"
    assert str(wgmma(128, 4, 4, 128, lead=2, prefetch=2)) == \
        "wgmma bm=128 bk=64 warps=4 stages=4 lead=2 prefetch=2"
    assert not wgmma(128, 4, 4, 128, lead=4).fits(4096, 128)  # lead < stages
    assert not wgmma(128, 4, 4, 128, prefetch=9).fits(4096, 128)  # 1..8 k-tiles of codes
    assert not wgmma(128, 4, 4, 128, prefetch=0).fits(4096, 128)
    with pytest.raises(ValueError, match="lead, shared_weights, dequant and half_atoms are"):
        Schedule(bm=16, lead=1)
    with pytest.raises(ValueError, match="lead, shared_weights, dequant and half_atoms are"):
        Schedule(bm=16, half_atoms=True)
    with pytest.raises(ValueError, match="half_atoms is the wgmma kernel's with the weights"):
        wgmma(256, 8, 4, 128, lead=2, shared_weights=True, half_atoms=True)
    shared = wgmma(256, 8, 4, 128, lead=2, prefetch=4, shared_weights=True)
    assert str(shared) == \
        "wgmma shared_weights bm=256 bk=64 warps=8 stages=4 lead=2 prefetch=4"
    assert shared.constants() == {"bm": 256, "bk": 64, "num_warps": 8, "stages": 4,
                                  "lead": 2, "prefetch": 4}
    assert shared.fits(4096, 128) and shared in candidates(4096, 12288, 4096, 128,
                                                            hopper=True)
    assert not wgmma(256, 8, 4, 128, lead=3, shared_weights=True).fits(4096, 128)
    # codes in flight: up to REGISTER_A_AHEAD k-tiles in the register-A kernel, 4 in the
    # shared-weights and stream-K kernels
    assert wgmma(64, 4, 4, 128, prefetch=REGISTER_A_AHEAD).fits(4096, 128)
    assert not wgmma(64, 4, 4, 128, prefetch=REGISTER_A_AHEAD + 1).fits(4096, 128)
    assert not wgmma(256, 8, 4, 128, lead=2, prefetch=5, shared_weights=True).fits(4096, 128)
    assert not wgmma(64, 4, 4, 128, prefetch=5, stream_k=1).fits(4096, 128)
    assert not any(s.shared_weights for s in candidates(4096, 12288, 4096, 64, hopper=True))
    assert wgmma(128, 4, 2, 32).bk == 32 and wgmma(128, 4, 2, 32).fits(4096, 32)
    assert not Schedule(128, 64, 6, wgmma=True, stages=2).fits(4096, 128)  # not warpgroups
    assert not Schedule(264, 64, 4, wgmma=True, stages=2).fits(4096, 128)  # wgmma's N
    with pytest.raises(ValueError, match="wgmma schedule takes"):
        Schedule(128, 64, 4, wgmma=True, x_shared=False)
    # Split-K: the register-A kernel's, in whole iterations of whole groups, where the
    # last block's sum fits (two tiles of at most 128 partial sums a thread).
    split = wgmma(64, 4, 4, 128, lead=2, prefetch=2, split_k=4)
    assert str(split) == "wgmma bm=64 bk=64 warps=4 stages=4 lead=2 prefetch=2 split_k=4"
    assert split.constants()["split_k"] == 4 and split.block_columns == 128
    assert split.fits(4096, 128) and not split.fits(4096, 512)  # 256-row iterations
    assert not replace(split, split_k=17).fits(4096, 128)  # 16 iterations
    assert wgmma(128, 4, 4, 128, split_k=2).fits(4096, 128)  # 128 sums a thread
    assert not wgmma(256, 4, 4, 128, split_k=2).fits(4096, 128)  # 256
    # at most 128 accumulators a thread, split or not (256 x 128 of whole atoms in one
    # warpgroup: 256, which the VM refuses to allocate); two warpgroups on k-tile pairs
    # each hold the whole tile's columns
    assert not wgmma(256, 4, 4, 128).fits(4096, 128)
    assert not wgmma(256, 4, 4, 128, prefetch=2, stream_k=1).fits(4096, 128)
    assert wgmma(256, 8, 2, 128, lead=1, prefetch=2, half_atoms=True, pair_k=True).fits(
        4096, 128)  # 128 a thread
    assert wgmma(256, 8, 4, 128, half_atoms=True, split_k=2).fits(4096, 128)  # 128
    # the shared-weights kernel's too (128 columns a block with 64-row k-tiles), not
    # with a converting producer or in the dequantize-then-multiply pair
    shared_split = wgmma(256, 8, 4, 128, lead=2, prefetch=4, shared_weights=True, split_k=3)
    assert shared_split.block_columns == 128 and shared_split.splits_k_kernel
    assert shared_split.fits(4096, 128) and not shared_split.fits(4096, 512)
    assert shared.splits_k_kernel and not dequant_schedule().splits_k_kernel
    with pytest.raises(ValueError, match="split_k is the wgmma kernels' without"):
        wgmma(256, 8, 4, 128, lead=2, split_k=2, shared_weights=True, producer=128)
    with pytest.raises(ValueError, match="split_k is the wgmma kernels' without"):
        Schedule(256, 64, 8, 2, wgmma=True, stages=4, lead=2, dequant=True)
    # column tiles sharing x: the register-A and shared-weights kernels', 2 or 4,
    # unsplit, without a converting producer
    clustered = wgmma(64, 4, 4, 128, lead=2, prefetch=4, half_atoms=True, cluster_n=2)
    assert clustered.constants()["cluster_n"] == 2 and str(clustered).endswith("cluster_n=2")
    sharing = wgmma(256, 8, 4, 128, lead=2, prefetch=4, shared_weights=True, cluster_n=2)
    assert sharing.constants()["cluster_n"] == 2 and sharing.fits(4096, 128)
    for bad in (dict(cluster_n=3), dict(cluster_n=2, split_k=2),
                dict(cluster_n=2, shared_weights=True, producer=128),
                dict(cluster_n=4, stream_k=1)):
        with pytest.raises(ValueError, match="cluster_n"):
            wgmma(64, 4, 4, 128, lead=2, **bad)
    with pytest.raises(ValueError, match="one kernel"):
        Schedule(128, 64, 4, wgmma=True, staged=True)
    # Prefill on Hopper: the wgmma kernel only (it beat the staged one at every type
    # measured); elsewhere the staged kernel; the default follows.
    found = candidates(4096, 12288, 4096, 128, hopper=True)
    assert found and all(c.wgmma for c in found)
    assert not any(c.wgmma for c in candidates(4096, 12288, 4096, 128))
    assert any(c.wgmma for c in candidates(256, 12288, 4096, 128, hopper=True))
    # Where the shared-weights kernel fits, two wgmma tilings beside it (it beat them all);
    # with 32-row k-tiles, every wgmma tiling; and the dequantize-then-multiply pair
    # (tests/kernels/test_kernels_qmm_dequant.py).
    assert len(found) == 1 + len(WGMMA_TILES_BESIDE_SHARED) + 1
    assert set(WGMMA_TILES_BESIDE_SHARED) <= set(WGMMA_TILES)
    assert len(candidates(4096, 12288, 4096, 64, hopper=True)) == len(WGMMA_TILES) + 1
    assert default_schedule(4096, 12288, 4096, 128, hopper=True) == shared
    assert default_schedule(4096, 12288, 4096, 64, hopper=True) == \
        wgmma_tile(WGMMA_TILES[0], 64)
    assert default_schedule(128, 12288, 4096, 128, hopper=True) == \
        wgmma_tile(WGMMA_TILES[0], 128)  # 128 rows: a 256-row tile would be half empty
    assert default_schedule(4096, 12288, 4096, 128).staged
    assert not default_schedule(16, 12288, 4096, 128, hopper=True).wgmma
    # 6- and 8-bit codes: the half-atom tiling beside those, and the default from 256 rows
    half = wgmma_tile(WGMMA_HALF_ATOM_TILES[0], 128, half_atoms=True)
    assert half.constants() == {"bm": 256, "bk": 64, "num_warps": 8, "stages": 4,
                                "lead": 2, "prefetch": 2, "half_atoms": True}
    assert str(half) == "wgmma half_atoms bm=256 bk=64 warps=8 stages=4 lead=2 prefetch=2"
    for bits in (6, 8):
        assert candidates(4096, 12288, 4096, 128, hopper=True, bits=bits) == \
            [shared, half, *found[1:]]
        assert default_schedule(4096, 12288, 4096, 128, hopper=True, bits=bits) == half
    for bits in (2, 3, 4):
        assert half not in candidates(4096, 12288, 4096, 128, hopper=True, bits=bits)
        assert default_schedule(4096, 12288, 4096, 128, hopper=True, bits=bits) == shared
    assert default_schedule(128, 12288, 4096, 128, hopper=True, bits=8) == \
        wgmma_tile(WGMMA_TILES[0], 128)


def test_between_decode_and_prefill_on_hopper_the_wgmma_kernel_splits_k():
    """33..256 rows on Hopper: the register-A wgmma kernel with K split (`MIDDLE_TILES`:
    half atoms for even widths, in three too up to 64 rows, tiles of more than 64 rows
    and k-tile pairs from 65 rows; for odd widths k-tile pairs of whole atoms instead),
    beside the streaming kernel's 32-row tiles up to 64 rows and the 256-row tilings
    above; elsewhere no wgmma kernel splits K."""
    for bits, tiles in ((4, 2), (3, 1)):
        found = candidates(64, 4096, 14336, 128, hopper=True, bits=bits)
        split = [s for s in found if s.wgmma and s.num_warps == 4]
        assert len(split) == 5 * tiles and {s.split_k for s in split} == {1, 2, 3, 4, 8}
        assert all(s.bm == 64 for s in found if s.wgmma)
        assert {s.half_atoms for s in split} == ({False, True} if bits == 4 else {False})
        # one 8-warp tile, unsplit: half atoms, or for the odd width two warpgroups of
        # whole atoms on k-tile pairs
        assert [(s.split_k, s.half_atoms, s.pair_k) for s in found if s.num_warps == 8] \
            == [(1, bits == 4, bits == 3)]
        assert all(s.bm == 32 for s in found if not s.wgmma)  # no 64-row streaming tiles
        assert len(found) <= 21
    found = candidates(256, 4096, 14336, 128, hopper=True, bits=8)
    assert all(s.wgmma for s in found) and len(found) <= 23
    # from 65 rows two warpgroups on the k-tile pairs of 128 x 64 tiles, 4 or 2 stages
    assert {(s.bm, s.stages, s.lead, s.split_k) for s in found if s.pair_k} == \
        {(128, 4, 2, 1), (128, 2, 1, 1)}
    assert not any(s.pair_k for s in candidates(64, 4096, 14336, 128, hopper=True, bits=4))
    odd = candidates(256, 4096, 14336, 128, hopper=True, bits=3)
    assert {(s.bm, s.half_atoms, s.split_k) for s in odd if s.pair_k} == \
        {(64, False, 1), (128, False, 2)}
    assert {s.bm for s in found if s.split_k > 1} == {64, 128, 256}
    assert {(s.bm, s.half_atoms) for s in found if s.split_k > 2} == {(64, False),
                                                                      (64, True), (128, True)}
    assert len(odd) <= 11
    assert wgmma_tile(WGMMA_HALF_ATOM_TILES[0], 128, half_atoms=True) in found
    assert any(s.shared_weights for s in found)
    # up to 256 rows the shared-weights kernel split in two too, not for prefill
    assert {s.split_k for s in found if s.shared_weights} == {1, 2}
    assert not any(s.wgmma and s.split_k > 1 for M in (1, 16, 4096)
                   for s in candidates(M, 4096, 14336, 128, hopper=True, bits=4))
    assert not any(s.wgmma for s in candidates(64, 4096, 14336, 128, bits=4))
    # a split takes whole iterations of whole groups: none with 512-row groups
    assert not any(s.wgmma and s.split_k > 1
                   for s in candidates(64, 4096, 14336, 512, hopper=True))


def test_between_decode_and_prefill_narrow_half_atoms_keep_codes_four_k_tiles_ahead():
    """One warpgroup of half atoms of 64 and 128 rows (or two on k-tile pairs) keeps the
    codes four k-tiles ahead for widths up to 6 bits, two for 8 bits; the other tilings
    two; every one fits."""
    for bits in (2, 4, 6, 8):
        for M in (64, 256):
            found = middle_tiles(M, 128, bits)
            deep = {s for s in found if s.prefetch == 4}
            assert deep == {s for s in found if s.half_atoms and bits <= 6 and s.bm <= 128
                            and (s.num_warps == 4 or s.pair_k)}
            assert all(s.prefetch == 2 for s in found if s not in deep)
            assert deep <= set(candidates(M, 4096, 14336, 128, hopper=True, bits=bits))
            assert all(s.fits(14336, 128) for s in found)


def test_half_atoms_take_codes_of_even_widths_only():
    """A schedule given by hand with half atoms for codes of an odd width (a half atom's
    codes are not one run of whole bytes) is refused when the kernel is specialized,
    naming the kernel's line."""
    s = wgmma(256, 8, 4, 128, lead=2, half_atoms=True)
    with pytest.raises(VMError, match="half_atoms takes codes of an even width, got int3") \
            as info:
        schedule_kernel(s).specialize(wdtype=dtypes.parse("int3"), group_size=128,
                                      **s.constants())
    assert "qmm_wgmma.py" in str(info.value)
