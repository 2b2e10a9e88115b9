"""The cost model's traffic and FLOPs (cost/traffic.py, cost/flops.py) against closed
forms written out here: the tiled matmul example, the quantized matmul kernels (the
streaming kernel with and without split-K and swapped operands, a Hopper wgmma kernel),
hand-written kernels with a loop over the block index, a branch, packed int4 loads and
every FLOP rule."""

from __future__ import annotations

import importlib

import pytest

from tilevm import dtypes
from tilevm.cost import walk
from tilevm.cost.traffic import LEVELS, analyze_traffic
from tilevm.kernels.matmul_launch import schedule_kernel
from tilevm.kernels.qmm import qmm_kernel
from tilevm.kernels.schedule import Schedule
from tilevm.kernels.tilings import WGMMA_TILES, wgmma_tile
from tilevm.vm import lang as tv

matmul = importlib.import_module("tilevm.examples.matmul").matmul
INT4 = dtypes.parse("int4")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ---- the tiled matmul example ------------------------------------------------------------

@pytest.mark.parametrize("tile, sizes", [
    ((32, 32, 32), (64, 96, 128)),
    ((64, 64, 32), (256, 128, 64)),
    ((64, 32, 16), (128, 4096, 4096)),  # sampled blocks and k-tiles, uniform: exact
])
def test_matmul_example_closed_form(tile, sizes):
    g_m, g_n, bk = tile
    M, N, K = sizes
    t = analyze_traffic(matmul.specialize(bm=g_m, bn=g_n, bk=bk), {"M": M, "N": N, "K": K})
    # H = b_a M K (N / g_n) + b_b K N (M / g_m) reads, b_out M N writes (f16: 2 bytes)
    reads = 2 * M * K * (N // g_n) + 2 * K * N * (M // g_m)
    assert t.grid == (M // g_m, N // g_n, 1)
    assert t.total == {"global->register": reads, "global->shared": 0, "shared->register": 0,
                       "register->shared": 0, "register->global": 2 * M * N,
                       "dram": reads + 2 * M * N}
    assert t.issued == {level: t.total[level] for level in LEVELS}
    assert t.tensors["a"].read == 2 * M * K * (N // g_n)
    assert t.tensors["b"].read == 2 * K * N * (M // g_m)
    assert t.tensors["c"].written == 2 * M * N
    blocks = (M // g_m) * (N // g_n)
    assert t.per_block["global->register"] == (g_m * K + K * g_n) * 2
    assert t.block_max["global->register"] == t.per_block["global->register"]
    assert t.flops["tensor_core"] == 2 * M * N * K
    assert t.flops_per_block["tensor_core"] == 2 * g_m * g_n * K
    # the f32 accumulator cast to f16 once (a cast between wide types: "fma")
    assert t.flops["fma"] == M * N and t.flops["convert"] == 0
    assert blocks == t.grid[0] * t.grid[1]
    assert not t.approximate


def test_matmul_ragged_edges_move_only_what_is_inside():
    M, N, K = 2000, 1999, 1001  # no size a multiple of its tile; both axes sampled
    t = analyze_traffic(matmul.specialize(bm=64, bn=64, bk=32), {"M": M, "N": N, "K": K})
    assert t.tensors["a"].read == 2 * M * K * cdiv(N, 64)
    assert t.tensors["b"].read == 2 * K * N * cdiv(M, 64)
    assert t.tensors["c"].written == 2 * M * N
    tiles = cdiv(M, 64) * cdiv(N, 64) * cdiv(K, 32)
    assert t.issued["global->register"] == tiles * 2 * (64 * 32 + 32 * 64)
    assert t.issued["register->global"] == cdiv(M, 64) * cdiv(N, 64) * 64 * 64 * 2
    assert t.flops["tensor_core"] == tiles * 2 * 64 * 64 * 32
    assert not t.approximate


def test_dram_reads_each_tensor_once_when_the_working_set_fits_l2():
    M, N, K = 128, 256, 512
    program = matmul.specialize(bm=32, bn=32, bk=32)
    working_set = 2 * (M * K + K * N + M * N)
    fits = analyze_traffic(program, {"M": M, "N": N, "K": K}, l2_bytes=working_set,
                           blocks_per_wave=3)
    assert fits.working_set == working_set
    assert fits.dram == working_set
    assert {p: t.footprint for p, t in fits.tensors.items()} == \
        {"a": 2 * M * K, "b": 2 * K * N, "c": 2 * M * N}
    # no L2: every moved read from DRAM
    none = analyze_traffic(program, {"M": M, "N": N, "K": K})
    assert none.dram == 2 * M * K * (N // 32) + 2 * K * N * (M // 32) + 2 * M * N


# ---- the quantized matmul kernels --------------------------------------------------------

def qmm_program(s: Schedule, wdtype=INT4, group_size: int = 128):
    return qmm_kernel("f16").specialize(wdtype=wdtype, group_size=group_size,
                                        has_zeros=False, **s.constants())


@pytest.mark.parametrize("schedule, sizes, bits", [
    (Schedule(bm=16, bk=64, num_warps=2), (32, 512, 1024), 4),
    (Schedule(bm=32, bk=32, num_warps=4, x_shared=False, prefetch=2), (64, 1024, 512), 3),
    (Schedule(bm=8, bk=64, num_warps=4, swap_ab=True, split_k=4), (8, 256, 1024), 4),
    (Schedule(bm=8, bk=64, num_warps=4, swap_ab=True, split_k=4), (1, 256, 1024), 4),
])
def test_qmm_streaming_kernel_closed_form(schedule, sizes, bits):
    M, N, K = sizes
    g = 128
    t = analyze_traffic(qmm_program(schedule, dtypes.parse(f"int{bits}"), g),
                        {"M": M, "N": N, "K": K})
    bm, bn, split = schedule.bm, 32 * schedule.num_warps, schedule.split_k
    rows = cdiv(M, bm)  # row tiles
    # weights N K bits / 8 once per row tile, f16 scales N K / g per row tile, x once per
    # row tile and column tile (only its M rows: the rows past M are masked), y once
    assert t.tensors["w"].read == N * K * bits // 8 * rows
    assert t.tensors["scales"].read == N * K // g * 2 * rows
    assert t.tensors["x"].read == M * K * 2 * (N // bn)
    assert t.tensors["y"].written == 2 * M * N
    assert "zeros" not in t.tensors
    if split > 1:  # f32 partial sums of every split, read back once by a tile's last block
        tiles = rows * (N // bn)
        assert t.tensors["ws"].written == t.tensors["ws"].read == split * tiles * bm * bn * 4
        assert t.tensors["counters"].written == tiles * (split + 1) * 4  # adds, reset
    else:
        assert "ws" not in t.tensors and "counters" not in t.tensors
    assert t.flops["tensor_core"] == 2 * (rows * bm) * N * K
    assert t.flops["mma_sync"] == t.flops["tensor_core"]  # (dots of register tiles)
    assert t.flops["convert"] == rows * N * K  # every weight code converted per row tile
    assert not t.approximate


def test_qmm_wgmma_kernel_closed_form():
    M, N, K = 256, 512, 1024
    s = wgmma_tile(WGMMA_TILES[0], 128)
    program = schedule_kernel(s).specialize(wdtype=INT4, group_size=128, has_zeros=False,
                                            wide_stores=True, **s.constants())
    t = analyze_traffic(program, {"M": M, "N": N, "K": K})
    rows, columns = cdiv(M, s.bm), N // s.block_columns
    assert t.tensors["w"].read == N * K * 4 // 8 * rows
    # this kernel copies its group's scales with every k-tile of x: K / bk rows of them
    assert t.tensors["scales"].read == N * (K // s.bk) * 2 * rows
    assert t.tensors["x"].read == M * K * 2 * columns
    assert t.tensors["y"].written == 2 * M * N
    # x and the scales through shared memory, the weights straight into registers
    assert t.total["global->shared"] == t.tensors["x"].read + t.tensors["scales"].read
    assert t.total["global->register"] == t.tensors["w"].read
    assert t.flops["tensor_core"] == 2 * M * N * K
    assert t.flops["mma_sync"] == 0  # (x shared: wgmma)
    assert not t.approximate


# ---- hand-written kernels ----------------------------------------------------------------

@tv.kernel(num_warps=1)
def triangle(x: tv.ptr(tv.f32, const=True), y: tv.ptr(tv.f32), n: tv.int32):
    """Block b sums tiles 0..b of x (a loop bounded by the block index) and block 0
    alone stores (a branch on it)."""
    tv.grid(tv.cdiv(n, 16))
    gx = tv.global_view(x, [n])
    acc = tv.zeros([16], tv.f32)
    for j in tv.range(0, tv.block_idx(0) + 1):
        acc = acc + tv.load_global(gx, [j * 16], [16])
    if tv.block_idx(0) == 0:
        tv.store_global(tv.global_view(y, [16]), acc, [0])


def test_loop_over_the_block_index_is_walked_per_block():
    blocks = 12  # every block and iteration walked: exact
    t = analyze_traffic(triangle.specialize(), {"n": 16 * blocks})
    loads = blocks * (blocks + 1) // 2  # block b loads b + 1 tiles of 16 floats
    assert t.total["global->register"] == loads * 16 * 4
    assert t.total["register->global"] == 16 * 4
    assert t.flops["fma"] == loads * 16
    assert t.block_max["global->register"] == blocks * 16 * 4
    assert not t.approximate


def test_sampled_triangle_is_close_and_marked_approximate():
    blocks = 200  # sampled blocks and iterations, not uniform: approximate
    t = analyze_traffic(triangle.specialize(), {"n": 16 * blocks})
    exact = blocks * (blocks + 1) // 2 * 16 * 4
    assert t.approximate
    assert abs(t.total["global->register"] - exact) <= 0.03 * exact


@tv.kernel(num_warps=1)
def packed_sum(w: tv.ptr(tv.int4, const=True), y: tv.ptr(tv.f32), n: tv.int32):
    """Packed int4 codes loaded as such, converted, reduced with an fma on the way."""
    tv.grid(tv.cdiv(n, 64))
    codes = tv.load_global(tv.global_view(w, [n]), [tv.block_idx(0) * 64], [64])
    values = tv.cast(codes, tv.f32)
    total = tv.sum(tv.fma(values, values, values), 0, keepdim=True)
    tv.store_global(tv.global_view(y, [tv.cdiv(n, 64)]), total, [tv.block_idx(0)])


def test_packed_codes_count_their_bits_and_each_flop_rule():
    n = 64 * 5 - 10  # the last block's tile sticks out by 10 codes
    t = analyze_traffic(packed_sum.specialize(), {"n": n})
    assert t.total["global->register"] == n // 2  # 4 bits a code
    assert t.issued["global->register"] == 5 * 64 // 2
    assert t.flops == {"tensor_core": 0, "fma": 5 * (2 * 64 + 64), "convert": 5 * 64,
                       "mma_sync": 0}
    assert t.total["register->global"] == 5 * 4


# ---- sampling and errors -----------------------------------------------------------------

def test_sample_covers_the_range_once():
    for n in (0, 1, 16, 17, 23, 1000):
        picks = walk.sample(n)
        assert sum(w for _, w, _ in picks) == n
        assert all(0 <= i < n for i, _, _ in picks)
        assert len(picks) <= max(16, 4 + walk.SEGMENTS)


def test_errors_name_the_problem():
    program = matmul.specialize()
    with pytest.raises(ValueError, match="'K'.*missing"):
        analyze_traffic(program, {"M": 1, "N": 2})
    with pytest.raises(ValueError, match="no scalar parameter 'k'"):
        analyze_traffic(program, {"M": 1, "N": 2, "K": 3, "k": 4})
    with pytest.raises(TypeError, match="'N' .*integer, got 2.5"):
        analyze_traffic(program, {"M": 1, "N": 2.5, "K": 3})
    with pytest.raises(TypeError, match="specialize"):
        analyze_traffic(matmul, {"M": 1, "N": 2, "K": 3})
    with pytest.raises(ValueError, match="grid dimension 0 .* -1"):
        analyze_traffic(program, {"M": -32, "N": 2, "K": 3})


# ---- the attention example ---------------------------------------------------------------

attention = importlib.import_module("tilevm.examples.attention").attention


@pytest.mark.parametrize("S, BH, d", [(512, 2, 64), (4096, 3, 128)])
def test_attention_closed_form(S, BH, d):
    g_q = 64  # queries a block (block_q); keys and values streamed in tiles of 64
    t = analyze_traffic(attention.specialize(d=d), {"S": S, "BH": BH})
    b = 2  # f16
    # H = 2 b q d + 2 b (q / g_q) x d per head (q = x = S): q read and o written once,
    # K and V streamed once per block of queries; everything through shared memory
    for name in ("q", "o"):
        t_qo = t.tensors[name]
        assert t_qo.read + t_qo.written == b * S * d * BH
    assert t.tensors["k"].read == t.tensors["v"].read == b * (S // g_q) * S * d * BH
    assert t.total["global->shared"] == (b * S * d + 2 * b * (S // g_q) * S * d) * BH
    assert t.total["register->global"] == b * S * d * BH
    assert t.total["global->register"] == 0
    # s = q k^T and acc += p v: 2 S S d each per head
    assert t.flops["tensor_core"] == 4 * S * S * d * BH
    assert not t.approximate


def test_causal_attention_fetches_one_tile_past_the_diagonal():
    S, BH, d, tile = 512, 2, 64, 64
    t = analyze_traffic(attention.specialize(d=d, causal=True), {"S": S, "BH": BH})
    n = S // tile
    # block i walks key tiles 0..i and copies each tile's successor ahead: tiles 0..i+1,
    # the last block's successor outside S (masked)
    tiles = sum(i + 2 for i in range(n)) - 1
    assert t.tensors["k"].read == t.tensors["v"].read == 2 * tile * d * tiles * BH
    assert t.flops["tensor_core"] == 4 * tile * tile * d * n * (n + 1) // 2 * BH
    assert not t.approximate
