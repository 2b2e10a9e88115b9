"""A persistent matmul with a producer warp(group), three stages and a shared tile of its
own for the wide epilogue: y = x @ W for x `[M, K]`, W^T `[N, K]`, f16.

ptxas 13.0 schedules the conversions of this kernel's accumulators ahead of
`wgmma.wait_group 0` (wrong results on the GPU); tests/backend/test_wgmma_sass.py keeps it as the
case its SASS check must catch, and its `direct=True` form as one it must pass. The
stages are three (144 KB) and the 256 x 128 tile (66 KB padded) is its own allocation, so
the consumers store tile i while the producer already copies tile i + 1's first k-tiles
into the buffers they have released."""
# ruff: noqa: E501
from functools import cache

from tilevm.kernels.qmm import activation_type
from tilevm.kernels.wgmma_grid import tile_of
from tilevm.layouts import local, spatial
from tilevm.layouts.fragments import mma_m16n8k16_c
from tilevm.layouts.shared_layout import SharedLayout, swizzled
from tilevm.vm import lang as tv


@cache
def persistent_kernel(act="f16", registers=None):
    act = activation_type(act)

    @tv.kernel(num_warps=8)
    def pp3(x: tv.ptr(act, const=True), wt: tv.ptr(act, const=True), y: tv.ptr(act),
            M: tv.int32, N: tv.int32, K: tv.int32, P: tv.int32,
            *, bm: int = 256, bk: int = 64, num_warps: int = 8, stages: int = 3,
            lead: int = 2, group_m: int = 8, direct: bool = False):
        bn = 16 * num_warps
        tv.producer_warp(registers)
        tv.assume(K % (stages * bk) == 0)
        tv.assume(K >= stages * bk)  # the k loop runs: no select between acc and zeros
        tv.assume(N % 8 == 0)
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
        acc_layout = spatial(num_warps, 1) * local(1, bm // 8) * mma_m16n8k16_c()
        xs = [tv.alloc_shared(act, [bk, bm], layout=swizzled([bm, bk], act).permute((1, 0)))
              for _ in range(stages)]
        ws = [tv.alloc_shared(act, [bn, bk], layout=swizzled([bn, bk], act))
              for _ in range(stages)]
        if not direct:  # (direct: y stored from the fragments, 2 bytes at a time)
            out = tv.alloc_shared(act, [bm, bn], layout=SharedLayout((bm, bn), (bn + 4, 1), act.bits))
        threads = 32 * num_warps
        per_row = bn // 8
        rows = local(bm * bn // (8 * threads), 1).spatial(threads // per_row, per_row).local(1, 8)
        n_t, m_t = tile_of(pid, tiles_n, tiles_m, group_m)
        for first in range(lead):
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
                    # (past this block's last tile: its last k-tile again, never read;
                    # a producer warp needs a copy in every group)
                    nxt = tv.min(j + lead, total - 1)
                    n_c, m_c = tile_of(pid + nxt // k_tiles * P, tiles_n, tiles_m, group_m)
                    kc = nxt % k_tiles * bk
                    buf = (s + lead) % stages
                    tv.copy_async(xs[buf], gxt, [kc, m_c * bm])
                    tv.copy_async(ws[buf], gwt, [n_c * bn, kc])
                    tv.copy_async_commit()
            n_t, m_t = tile_of(pid + i * P, tiles_n, tiles_m, group_m)
            if direct:
                tv.store_global(tv.global_view(y, [N, M], strides=[1, N]), tv.cast(acc, act),
                                [n_t * bn, m_t * bm])
            else:
                tv.sync()  # every consumer is done reading `out` (the tile before)
                # (cast after the barrier: 128 f16 values live across it spilled)
                tile = tv.view(tv.cast(acc, act), act, [bm, bn], acc_layout.permute((1, 0)))
                tv.store_shared(out, tile)
                tv.sync()
                tv.store_global(tv.global_view(y, [M, N]),
                                tv.load_shared(out, [0, 0], [bm, bn], layout=rows),
                                [m_t * bm, n_t * bn])
        tv.copy_async_wait(0)

    pp3.name = f"pp3_{act.name}" + (f"_r{registers}" if registers else "")
    return pp3
