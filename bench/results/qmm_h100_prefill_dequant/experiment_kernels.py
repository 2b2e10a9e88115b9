"""Experiment: prefill as a dequantization pass (codes -> W^T f16 [Np, K]) and an f16 GEMM
(y^T = W^T x^T, both operands by TMA) with the shared-weights kernel's tiling."""
# ruff: noqa: F841
from functools import cache

from tilevm.dtypes import DataType
from tilevm.kernels.qmm import ATOM, ATOM_LAYOUT, activation_type, atom_code_layout
from tilevm.kernels.qmm_wgmma import grouped_tiles
from tilevm.layouts import local, spatial
from tilevm.layouts.fragments import mma_m16n8k16_c
from tilevm.layouts.shared_layout import swizzled
from tilevm.vm import lang as tv


@cache
def gemm_kernel(act="f16"):
    act = activation_type(act)

    @tv.kernel(num_warps=8)
    def wt_gemm(x: tv.ptr(act, const=True), wt: tv.ptr(act, const=True), y: tv.ptr(act),
                M: tv.int32, N: tv.int32, K: tv.int32,
                *, bm: int = 256, bk: int = 64, num_warps: int = 8, stages: int = 4,
                lead: int = 2, group_m: int = 8, resync: bool = False):
        bn = 16 * num_warps
        tv.assume(K % (stages * bk) == 0)
        tv.grid(tv.cdiv(N, bn), tv.cdiv(M, bm))
        n_tile, m_tile = grouped_tiles(tv.cdiv(N, bn), tv.cdiv(M, bm), group_m)
        n0, m0 = n_tile * bn, m_tile * bm
        gxt = tv.global_view(x, [K, M], strides=[1, K])
        gwt = tv.global_view(wt, [N, K])
        acc_layout = local(max(1, bn // (16 * num_warps)), 1) * \
            spatial(num_warps, 1) * local(1, bm // 8) * mma_m16n8k16_c()
        xs = [tv.alloc_shared(act, [bk, bm], layout=swizzled([bm, bk], act).permute((1, 0)))
              for _ in range(stages)]
        ws = [tv.alloc_shared(act, [bn, bk], layout=swizzled([bn, bk], act))
              for _ in range(stages)]
        for first in range(lead):
            tv.copy_async(xs[first], gxt, [first * bk, m0])
            tv.copy_async(ws[first], gwt, [n0, first * bk])
            tv.copy_async_commit()
        acc = tv.zeros([bn, bm], tv.f32, layout=acc_layout)
        for k0 in tv.range(0, K, stages * bk):
            for s in range(stages):
                k = k0 + s * bk if s else k0
                tv.copy_async_wait(lead - 1)
                tv.sync()
                acc = tv.dot(ws[s], xs[s], acc)
                if resync:
                    tv.sync()
                tv.copy_async(xs[(s + lead) % stages], gxt, [k + lead * bk, m0])
                tv.copy_async(ws[(s + lead) % stages], gwt, [n0, k + lead * bk])
                tv.copy_async_commit()
        tv.copy_async_wait(0)
        tv.store_global(tv.global_view(y, [N, M], strides=[1, N]), tv.cast(acc, act),
                        [n0, m0])

    wt_gemm.name = f"wt_gemm_{act.name}"
    return wt_gemm


@cache
def dequant_kernel(act="f16"):
    act = activation_type(act)

    @tv.kernel(num_warps=8)
    def dequant(w: tv.ptr(tv.uint8, const=True), scales: tv.ptr(act, const=True),
                wt: tv.ptr(act), N: tv.int32, K: tv.int32,
                *, wdtype: DataType = tv.int4, group_size: int = 128, num_warps: int = 8,
                bk: int = 64, via_shared: bool = False):
        b = wdtype.bits
        chunks = bk // ATOM
        atoms = num_warps // chunks
        bn = ATOM * atoms
        tv.assume(K % group_size == 0)
        Np = tv.cdiv(N, ATOM) * ATOM
        tv.grid(tv.cdiv(N, bn), K // bk)
        n_tile = tv.block_idx(0)
        n0 = n_tile * bn
        k = tv.block_idx(1) * bk
        gw = tv.global_view(w, [K // ATOM, Np // ATOM, 32, 4 * b])
        gs = tv.global_view(scales, [Np, K // group_size], strides=[1, Np])
        gwt = tv.global_view(wt, [Np, K])
        byte_layout = spatial(chunks, atoms, 32, 1).local(1, 1, 1, 4 * b)
        code_layout = (spatial(chunks, atoms) * atom_code_layout(b)).permute((1, 0))
        weight_layout = (spatial(chunks, atoms) * ATOM_LAYOUT).permute((1, 0))
        scale_layout = weight_layout.reduce(1)
        codes = tv.load_global(gw, [k // ATOM, n_tile * atoms, 0, 0],
                               [chunks, atoms, 32, 4 * b], layout=byte_layout)
        s = tv.load_global(gs, [n0, k // group_size], [bn, 1], layout=scale_layout)
        wv = tv.cast(tv.view(codes, wdtype, [bn, bk], code_layout), act, weight_layout) * s
        if via_shared:
            buf = tv.alloc_shared(act, [bn, bk], layout=swizzled([bn, bk], act))
            tv.store_shared(buf, wv)
            tv.sync()
            threads = 32 * num_warps
            rows = local(bn * bk // (8 * threads), 1).spatial(threads * 8 // bk, bk // 8) \
                .local(1, 8)
            wv = tv.load_shared(buf, [0, 0], [bn, bk], layout=rows)
        tv.store_global(gwt, wv, [n0, k])

    dequant.name = f"dequant_{act.name}"
    return dequant


def _tile_of(tid, tiles_n, tiles_m, group_m):
    per_group = group_m * tiles_n
    first = tid // per_group * group_m
    rows = tv.min(tiles_m - first, group_m)
    return tid % per_group // rows, first + tid % per_group % rows


@cache
def persistent_gemm_kernel(act="f16"):
    act = activation_type(act)

    @tv.kernel(num_warps=8)
    def pgemm(x: tv.ptr(act, const=True), wt: tv.ptr(act, const=True), y: tv.ptr(act),
              M: tv.int32, N: tv.int32, K: tv.int32, P: tv.int32,
              *, bm: int = 256, bk: int = 64, num_warps: int = 8, stages: int = 4,
              lead: int = 2, group_m: int = 8):
        bn = 16 * num_warps
        tv.assume(K % (stages * bk) == 0)
        tv.grid(P)
        tiles_n = tv.cdiv(N, bn)
        tiles_m = tv.cdiv(M, bm)
        tiles = tiles_n * tiles_m
        pid = tv.block_idx(0)
        mine = (tiles - pid + P - 1) // P  # this block's tiles: pid, pid + P, ...
        k_tiles = K // bk
        total = mine * k_tiles
        gxt = tv.global_view(x, [K, M], strides=[1, K])
        gwt = tv.global_view(wt, [N, K])
        gy = tv.global_view(y, [N, M], strides=[1, N])
        acc_layout = local(max(1, bn // (16 * num_warps)), 1) * \
            spatial(num_warps, 1) * local(1, bm // 8) * mma_m16n8k16_c()
        xs = [tv.alloc_shared(act, [bk, bm], layout=swizzled([bm, bk], act).permute((1, 0)))
              for _ in range(stages)]
        ws = [tv.alloc_shared(act, [bn, bk], layout=swizzled([bn, bk], act))
              for _ in range(stages)]
        for first in range(lead):
            n_t, m_t = _tile_of(pid, tiles_n, tiles_m, group_m)
            tv.copy_async(xs[first], gxt, [first * bk, m_t * bm])
            tv.copy_async(ws[first], gwt, [n_t * bn, first * bk])
            tv.copy_async_commit()
        for i in tv.range(0, mine):
            acc = tv.zeros([bn, bm], tv.f32, layout=acc_layout)
            for k0 in tv.range(0, k_tiles, stages):
                for s in range(stages):
                    j = i * k_tiles + k0 + s
                    tv.copy_async_wait(lead - 1)
                    tv.sync()
                    acc = tv.dot(ws[s], xs[s], acc)
                    nxt = j + lead
                    if nxt < total:
                        n_c, m_c = _tile_of(pid + nxt // k_tiles * P, tiles_n, tiles_m,
                                            group_m)
                        kc = nxt % k_tiles * bk
                        tv.copy_async(xs[(s + lead) % stages], gxt, [kc, m_c * bm])
                        tv.copy_async(ws[(s + lead) % stages], gwt, [n_c * bn, kc])
                    tv.copy_async_commit()
            n_t, m_t = _tile_of(pid + i * P, tiles_n, tiles_m, group_m)
            tv.store_global(gy, tv.cast(acc, act), [n_t * bn, m_t * bm])
        tv.copy_async_wait(0)

    pgemm.name = f"pgemm_{act.name}"
    return pgemm


@cache
def persistent2_gemm_kernel(act="f16"):
    """The persistent matmul with the next tile's coordinates computed once a tile."""
    act = activation_type(act)

    @tv.kernel(num_warps=8)
    def pgemm2(x: tv.ptr(act, const=True), wt: tv.ptr(act, const=True), y: tv.ptr(act),
               M: tv.int32, N: tv.int32, K: tv.int32, P: tv.int32,
               *, bm: int = 256, bk: int = 64, num_warps: int = 8, stages: int = 4,
               lead: int = 2, group_m: int = 8):
        bn = 16 * num_warps
        tv.assume(K % (stages * bk) == 0)
        tv.grid(P)
        tiles_n = tv.cdiv(N, bn)
        tiles_m = tv.cdiv(M, bm)
        tiles = tiles_n * tiles_m
        pid = tv.block_idx(0)
        mine = (tiles - pid + P - 1) // P
        k_tiles = K // bk
        gxt = tv.global_view(x, [K, M], strides=[1, K])
        gwt = tv.global_view(wt, [N, K])
        gy = tv.global_view(y, [N, M], strides=[1, N])
        acc_layout = local(max(1, bn // (16 * num_warps)), 1) * \
            spatial(num_warps, 1) * local(1, bm // 8) * mma_m16n8k16_c()
        xs = [tv.alloc_shared(act, [bk, bm], layout=swizzled([bm, bk], act).permute((1, 0)))
              for _ in range(stages)]
        ws = [tv.alloc_shared(act, [bn, bk], layout=swizzled([bn, bk], act))
              for _ in range(stages)]
        n_0, m_0 = _tile_of(pid, tiles_n, tiles_m, group_m)
        for first in range(lead):
            tv.copy_async(xs[first], gxt, [first * bk, m_0 * bm])
            tv.copy_async(ws[first], gwt, [n_0 * bn, first * bk])
            tv.copy_async_commit()
        for i in tv.range(0, mine):
            n_t, m_t = _tile_of(pid + i * P, tiles_n, tiles_m, group_m)
            n_n, m_n = _tile_of(pid + (i + 1) * P, tiles_n, tiles_m, group_m)
            more = i + 1 < mine
            acc = tv.zeros([bn, bm], tv.f32, layout=acc_layout)
            for k0 in tv.range(0, k_tiles, stages):
                for s in range(stages):
                    tv.copy_async_wait(lead - 1)
                    tv.sync()
                    acc = tv.dot(ws[s], xs[s], acc)
                    kk = k0 + (s + lead)
                    wrap = kk >= k_tiles
                    n_c = n_n if wrap else n_t
                    m_c = m_n if wrap else m_t
                    kc = (kk - k_tiles if wrap else kk) * bk
                    if more or not wrap:
                        tv.copy_async(xs[(s + lead) % stages], gxt, [kc, m_c * bm])
                        tv.copy_async(ws[(s + lead) % stages], gwt, [n_c * bn, kc])
                    tv.copy_async_commit()
            tv.store_global(gy, tv.cast(acc, act), [n_t * bn, m_t * bm])
        tv.copy_async_wait(0)

    pgemm2.name = f"pgemm2_{act.name}"
    return pgemm2


def _mm_step(xs, ws, acc, s, stages, lead, gxt, gwt, copy_at):
    """One k-tile: wait, barrier, dot on buffer s, then the copy of k-tile `copy_at`
    ((k, m0, n0) or None) into buffer s + lead."""
    tv.copy_async_wait(lead - 1)
    tv.sync()
    acc = tv.dot(ws[s], xs[s], acc)
    kc, m_c, n_c, _ = copy_at
    tv.copy_async(xs[(s + lead) % stages], gxt, [kc, m_c])
    tv.copy_async(ws[(s + lead) % stages], gwt, [n_c, kc])
    tv.copy_async_commit()
    return acc


@cache
def persistent3_gemm_kernel(act="f16"):
    """The persistent matmul with the last loop iteration of a tile peeled: its copies
    for the next tile use coordinates computed once a tile, no selects."""
    act = activation_type(act)

    @tv.kernel(num_warps=8)
    def pgemm3(x: tv.ptr(act, const=True), wt: tv.ptr(act, const=True), y: tv.ptr(act),
               M: tv.int32, N: tv.int32, K: tv.int32, P: tv.int32,
               *, bm: int = 256, bk: int = 64, num_warps: int = 8, stages: int = 4,
               lead: int = 2, group_m: int = 8):
        bn = 16 * num_warps
        tv.assume(K % (stages * bk) == 0)
        tv.grid(P)
        tiles_n = tv.cdiv(N, bn)
        tiles_m = tv.cdiv(M, bm)
        tiles = tiles_n * tiles_m
        pid = tv.block_idx(0)
        mine = (tiles - pid + P - 1) // P
        k_tiles = K // bk
        gxt = tv.global_view(x, [K, M], strides=[1, K])
        gwt = tv.global_view(wt, [N, K])
        gy = tv.global_view(y, [N, M], strides=[1, N])
        acc_layout = local(max(1, bn // (16 * num_warps)), 1) * \
            spatial(num_warps, 1) * local(1, bm // 8) * mma_m16n8k16_c()
        xs = [tv.alloc_shared(act, [bk, bm], layout=swizzled([bm, bk], act).permute((1, 0)))
              for _ in range(stages)]
        ws = [tv.alloc_shared(act, [bn, bk], layout=swizzled([bn, bk], act))
              for _ in range(stages)]
        n_0, m_0 = _tile_of(pid, tiles_n, tiles_m, group_m)
        for first in range(lead):
            tv.copy_async(xs[first], gxt, [first * bk, m_0 * bm])
            tv.copy_async(ws[first], gwt, [n_0 * bn, first * bk])
            tv.copy_async_commit()
        for i in tv.range(0, mine):
            n_t, m_t = _tile_of(pid + i * P, tiles_n, tiles_m, group_m)
            n0, m0 = n_t * bn, m_t * bm
            acc = tv.zeros([bn, bm], tv.f32, layout=acc_layout)
            for k0 in tv.range(0, K - stages * bk, stages * bk):
                for s in range(stages):
                    acc = _mm_step(xs, ws, acc, s, stages, lead, gxt, gwt,
                                   (k0 + (s + lead) * bk, m0, n0, None))
            n_n, m_n = _tile_of(pid + (i + 1) * P, tiles_n, tiles_m, group_m)
            more = i + 1 < mine
            last = K - stages * bk
            for s in range(stages):
                if s + lead < stages:
                    acc = _mm_step(xs, ws, acc, s, stages, lead, gxt, gwt,
                                   (last + (s + lead) * bk, m0, n0, None))
                else:
                    tv.copy_async_wait(lead - 1)
                    tv.sync()
                    acc = tv.dot(ws[s], xs[s], acc)
                    if more:
                        kc = (s + lead - stages) * bk
                        tv.copy_async(xs[(s + lead) % stages], gxt, [kc, m_n * bm])
                        tv.copy_async(ws[(s + lead) % stages], gwt, [n_n * bn, kc])
                    tv.copy_async_commit()
            tv.store_global(gy, tv.cast(acc, act), [n0, m0])
        tv.copy_async_wait(0)

    pgemm3.name = f"pgemm3_{act.name}"
    return pgemm3
