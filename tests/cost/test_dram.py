"""The DRAM model (cost/dram.py, cost/footprint.py, cost/regions.py): the bytes a set of
tiles covers against sets of addresses enumerated one by one; the wave rule on the
matmul example against the rule worked on sets of tile numbers; a streaming decode
quantized matmul and the attention example against their closed forms."""

from __future__ import annotations

import importlib
import random
from fractions import Fraction

import pytest

from tilevm import dtypes
from tilevm.cost.regions import memory_pieces, merge_box, plane_for, union_area
from tilevm.cost.traffic import analyze_traffic
from tilevm.kernels.qmm import qmm_kernel
from tilevm.kernels.schedule import Schedule

matmul = importlib.import_module("tilevm.examples.matmul").matmul
attention = importlib.import_module("tilevm.examples.attention").attention


# ---- the geometry ------------------------------------------------------------------------

def addresses(offset, shape, strides, bits, box):
    """The bits a box covers inside the view, one by one."""
    (lo, hi), out = box, set()
    ranges = [range(max(a, 0), min(b, n)) for a, b, n in zip(lo, hi, shape)]

    def walk(d, address):
        if d == len(ranges):
            out.update(range(address * bits, address * bits + bits))
            return
        for i in ranges[d]:
            walk(d + 1, address + i * strides[d])
    walk(0, offset)
    return out


def test_union_of_boxes_in_memory_matches_the_addresses():
    rng = random.Random(7)
    for _ in range(40):
        ndim = rng.choice((1, 2, 3))
        shape = tuple(rng.randint(1, 9) for _ in range(ndim))
        order = list(range(ndim))
        rng.shuffle(order)  # which dimension is contiguous: transposed views too
        strides, step = [0] * ndim, 1
        for d in reversed(order):
            strides[d] = step
            step *= shape[d] + rng.choice((0, 0, 2))  # padded rows now and then
        bits = rng.choice((4, 8, 16))
        views = [(rng.randint(0, 20), shape, tuple(strides))]
        views.append((views[0][0] + rng.randint(0, 30), shape, tuple(strides)))
        expected, pieces = set(), []
        for _ in range(rng.randint(1, 6)):
            offset, shape_, strides_ = rng.choice(views)
            lo = tuple(rng.randint(-2, n) for n in shape_)
            box = (lo, tuple(a + rng.randint(1, 5) for a in lo))
            expected |= addresses(offset, shape_, strides_, bits, box)
            piece = memory_pieces(offset, shape_, strides_, bits, box)
            if piece is not None:
                pieces.append(piece)
        plane = plane_for(pieces)
        assert union_area(r for p in pieces for r in plane.rectangles(p)) == len(expected)


def test_merge_box_joins_touching_tiles_only():
    boxes = []
    for k in range(0, 96, 32):  # a row panel's k-tiles, out of order
        merge_box(boxes, ((0, (k * 5) % 96), (16, (k * 5) % 96 + 32)))
    assert boxes == [((0, 0), (16, 96))]
    merge_box(boxes, ((0, 8), (16, 40)))  # inside
    merge_box(boxes, ((32, 0), (48, 96)))  # a gap of 16 rows: apart
    assert boxes == [((0, 0), (16, 96)), ((32, 0), (48, 96))]


# ---- the wave rule -----------------------------------------------------------------------

def wave_rule_on_tiles(waves, sizes, l2_bytes):
    """DRAM reads by tensor of the rule of cost/dram.py, worked on sets of distinct
    tiles: each wave is {tensor: (tiles read, tiles written)}, `sizes[tensor]` a tile's
    bytes. A tile last touched j waves ago is kept with probability 1 - d / l2_bytes,
    d the bytes waves w - j .. w - 1 touched; all of them where everything fits."""
    def size(tiles):
        return sum(len(u) * sizes[t] for t, u in tiles.items())
    everything = {t: set().union(*(r | wr for r, wr in (wave[t] for wave in waves)))
                  for t in sizes}
    if size(everything) <= l2_bytes:  # nothing evicted: each tile once
        return {t: len(set().union(*(wave[t][0] for wave in waves))) * sizes[t]
                for t in sizes}
    fetched = dict.fromkeys(sizes, Fraction(0))
    for w, wave in enumerate(waves):
        for t, (reads, _) in wave.items():
            for tile in reads:
                last = next((j for j in range(1, w + 1)
                             if tile in waves[w - j][t][0] | waves[w - j][t][1]), None)
                if last is None:
                    fetched[t] += sizes[t]
                    continue
                since = {u: set().union(*(r | wr for r, wr in (waves[v][u] for v in
                                                                range(w - last, w))))
                         for u in sizes}
                fetched[t] += sizes[t] * min(1, Fraction(size(since), l2_bytes))
    return fetched


@pytest.mark.parametrize("per_wave, l2_bytes", [
    (6, 1), (6, 30_000), (6, 40_000), (6, 1 << 20), (3, 28_000), (3, 40_000),
])
def test_matmul_waves_fetch_the_union_of_their_reads(per_wave, l2_bytes):
    M, N, K, tile = 128, 256, 64, 32
    gx, gy = M // tile, N // tile  # 4 x 8 blocks: waves of 6, 6, 6, 6, 6, 2 (or 3s)
    t = analyze_traffic(matmul.specialize(bm=tile, bn=tile, bk=32), {"M": M, "N": N, "K": K},
                        l2_bytes=l2_bytes, blocks_per_wave=per_wave)
    waves = []
    for first in range(0, gx * gy, per_wave):
        blocks = [(i % gx, i // gx) for i in range(first, min(first + per_wave, gx * gy))]
        waves.append({"a": ({x for x, _ in blocks}, set()), "b": ({y for _, y in blocks}, set()),
                      "c": (set(), set(blocks))})
    # a row panel of A and a column panel of B are 32 x 64 f16 (4 KiB), a tile of C 2 KiB
    sizes = {"a": tile * K * 2, "b": K * tile * 2, "c": tile * tile * 2}
    fetched = wave_rule_on_tiles(waves, sizes, l2_bytes)
    for name in "ab":  # bits rounded once, then to bytes
        assert abs(t.tensors[name].dram - fetched[name]) <= 1, name
    assert t.tensors["c"].dram == 2 * M * N
    if l2_bytes == 1 << 20:  # everything fits: each byte once
        assert t.dram == 2 * (M * K + K * N + M * N)
    if l2_bytes == 1:  # (almost) nothing kept: every wave reads its panels
        reads = sum(len(w["a"][0]) + len(w["b"][0]) for w in waves) * 4096
        assert reads - 4 <= t.dram - 2 * M * N <= reads  # a byte of L2 shared out
    assert not t.approximate


def qmm_decode(num_warps=2):
    s = Schedule(bm=16, bk=64, num_warps=num_warps)
    return qmm_kernel("f16").specialize(wdtype=dtypes.parse("int4"), group_size=128,
                                        has_zeros=False, **s.constants())


@pytest.mark.parametrize("l2_bytes", [200_000, 1 << 16])
def test_streaming_decode_reads_the_weights_once_and_x_as_l2_keeps_it(l2_bytes):
    M, N, K = 1, 1024, 1024  # 16 blocks of 64 columns, waves of 4
    t = analyze_traffic(qmm_decode(), {"M": M, "N": N, "K": K}, l2_bytes=l2_bytes,
                        blocks_per_wave=4)
    w, scales, x, y = N * K // 2, N * K // 128 * 2, M * K * 2, M * N * 2
    assert t.working_set == w + scales + x + y > l2_bytes
    # a wave touches a quarter of the weights, scales and y, and all of x: each wave
    # after the first finds x in L2 at 1 - (a wave's bytes) / L2, none if it is larger
    wave = (w + scales + y) // 4 + x
    kept = max(0, 1 - Fraction(wave, l2_bytes))
    x_dram = x + 3 * (1 - kept) * x
    assert abs(t.tensors["x"].dram - x_dram) <= 1
    assert t.dram - t.tensors["x"].dram == w + scales + y
    assert t.tensors["x"].read == 16 * x  # moved: once per block


@pytest.mark.parametrize("per_wave, l2_bytes, kv_reads", [
    (8, 1, 1),  # a wave is one head's 8 blocks: K and V once
    # half a head a wave (192 KiB): the second finds K and V at 1 - 192 KiB / L2
    (4, 300_000, 1 + Fraction(192 * 1024, 300_000)),
    (4, 96 * 1024, 2),  # a wave is larger than L2: K and V read again
])
def test_attention_shares_k_and_v_within_a_wave(per_wave, l2_bytes, kv_reads):
    S, BH, d = 512, 4, 64
    t = analyze_traffic(attention.specialize(d=d), {"S": S, "BH": BH}, l2_bytes=l2_bytes,
                        blocks_per_wave=per_wave)
    head = 2 * S * d  # bytes of one head's q, k, v or o
    assert t.tensors["q"].dram == t.tensors["o"].dram == head * BH
    assert t.tensors["k"].dram == t.tensors["v"].dram
    assert abs(t.tensors["k"].dram - kv_reads * head * BH) <= 1  # (bits rounded once)
    assert t.tensors["k"].read == (S // 64) * head * BH  # moved: once per block


def test_blocks_per_wave_must_be_positive():
    with pytest.raises(ValueError, match="blocks_per_wave must be at least 1, got 0"):
        analyze_traffic(matmul.specialize(), {"M": 64, "N": 64, "K": 64}, l2_bytes=1,
                        blocks_per_wave=0)


@pytest.mark.parametrize("per_wave, ws_fetched", [(8, 0), (2, 3)])
def test_split_k_partial_sums_are_read_back_from_l2_where_it_holds_them(per_wave, ws_fetched):
    M, N, K, split = 1, 256, 1024, 4
    s = Schedule(bm=8, bk=64, num_warps=4, swap_ab=True, split_k=split)
    program = qmm_kernel("f16").specialize(wdtype=dtypes.parse("int4"), group_size=128,
                                           has_zeros=False, **s.constants())
    # blocks (column tile, 0, split): 2 x 1 x 4; a tile's last split (z = 3) reads the
    # f32 partial sums [8, 128] of every split; with waves of 2 (one split each) and no
    # L2 to speak of, those of splits 0..2 come back from DRAM
    t = analyze_traffic(program, {"M": M, "N": N, "K": K}, l2_bytes=1,
                        blocks_per_wave=per_wave)
    tiles, part = N // 128, 8 * 128 * 4
    assert t.tensors["ws"].written == t.tensors["ws"].read == split * tiles * part
    assert t.tensors["ws"].dram == split * tiles * part + ws_fetched * tiles * part
    assert t.tensors["counters"].dram == tiles * 4
    assert t.tensors["w"].dram == N * K // 2
    assert t.tensors["scales"].dram == N * K // 128 * 2
    assert t.tensors["x"].dram == M * K * 2
    assert t.tensors["y"].dram == M * N * 2


def test_a_large_launch_is_estimated_from_sampled_waves(monkeypatch):
    from tilevm.cost import dram

    program = matmul.specialize(bm=32, bn=32, bk=32)
    sizes = {"M": 2048, "N": 2560, "K": 256}  # 64 x 80 = 5,120 blocks: 18 waves of 300
    assert 64 * 80 > dram.SAMPLE_ABOVE
    sampled = analyze_traffic(program, sizes, l2_bytes=1 << 20, blocks_per_wave=300)
    monkeypatch.setattr(dram, "SAMPLE_ABOVE", 10 ** 9)
    exact = analyze_traffic(program, sizes, l2_bytes=1 << 20, blocks_per_wave=300)
    assert sampled.approximate and not exact.approximate
    # the waves of a tiled kernel differ little: interpolated between 12 of them
    assert sampled.dram == pytest.approx(exact.dram, rel=0.01)
    assert sampled.tensors["c"].dram == exact.tensors["c"].dram == 2 * 2048 * 2560
    assert sampled.working_set == pytest.approx(exact.working_set, rel=0.1)
    moved = {level: b for level, b in exact.total.items() if level != "dram"}
    assert {level: sampled.total[level] for level in moved} == moved  # (not sampled so)
