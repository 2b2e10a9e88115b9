"""Session 19's persistent matmul with a producer warp (`../qmm_h100_prefill_producer/
persistent_producer.py`), its tile of y stored through shared memory in 16-byte pieces
(the wide epilogue of `kernels.qmm_wgmma.store_transposed`) into a shared tile of its
own: the producer refills the stage buffers for the next tile meanwhile. Four stages
(192 KB) and a 256 x 128 tile (66 KB padded) do not fit a block's 227 KB, so the rows of x
are split in two halves, each its own x buffer, `dot` and accumulator (two
m64n128k16 instead of one m64n256k16), stored one half at a time through a 128 x 128
tile (33 KB)."""
# ruff: noqa: E501
from functools import cache

from tilevm.kernels.qmm import activation_type
from tilevm.kernels.qmm_wgmma import tile_of as _tile_of
from tilevm.layouts import local, spatial
from tilevm.layouts.fragments import mma_m16n8k16_c
from tilevm.layouts.shared_layout import SharedLayout, swizzled
from tilevm.vm import lang as tv


@cache
def persistent_wide_kernel(act="f16"):
    act = activation_type(act)

    @tv.kernel(num_warps=8)
    def ppwide(x: tv.ptr(act, const=True), wt: tv.ptr(act, const=True), y: tv.ptr(act),
               M: tv.int32, N: tv.int32, K: tv.int32, P: tv.int32,
               *, bm: int = 256, bk: int = 64, num_warps: int = 8, stages: int = 4,
               lead: int = 2, group_m: int = 8, wide: bool = True):
        bn = 16 * num_warps
        hm = bm // 2  # rows of x in each half
        tv.producer_warp()
        tv.assume(K % (stages * bk) == 0)
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
        acc_layout = spatial(num_warps, 1) * local(1, hm // 8) * mma_m16n8k16_c()
        xt = swizzled([hm, bk], act).permute((1, 0))
        xa = [tv.alloc_shared(act, [bk, hm], layout=xt) for _ in range(stages)]
        xb = [tv.alloc_shared(act, [bk, hm], layout=xt) for _ in range(stages)]
        ws = [tv.alloc_shared(act, [bn, bk], layout=swizzled([bn, bk], act))
              for _ in range(stages)]
        out = tv.alloc_shared(act, [hm, bn], layout=SharedLayout((hm, bn), (bn + 4, 1), act.bits))
        threads = 32 * num_warps
        per_row = bn // 8
        rows = local(hm * bn // (8 * threads), 1).spatial(threads // per_row, per_row).local(1, 8)
        for first in range(lead):
            n_t, m_t = _tile_of(pid, tiles_n, tiles_m, group_m)
            tv.copy_async(xa[first], gxt, [first * bk, m_t * bm])
            tv.copy_async(xb[first], gxt, [first * bk, m_t * bm + hm])
            tv.copy_async(ws[first], gwt, [n_t * bn, first * bk])
            tv.copy_async_commit()
        for i in tv.range(0, mine):
            acc_a = tv.zeros([bn, hm], tv.f32, layout=acc_layout)
            acc_b = tv.zeros([bn, hm], tv.f32, layout=acc_layout)
            for k0 in tv.range(0, k_tiles, stages):
                for s in range(stages):
                    j = i * k_tiles + k0 + s
                    tv.copy_async_wait(lead - 1)
                    tv.sync()
                    acc_a = tv.dot(ws[s], xa[s], acc_a)
                    acc_b = tv.dot(ws[s], xb[s], acc_b)
                    # (past this block's last tile: its last tile again, never read;
                    # a producer warp needs a copy in every group)
                    nxt = tv.min(j + lead, total - 1)
                    n_c, m_c = _tile_of(pid + nxt // k_tiles * P, tiles_n, tiles_m, group_m)
                    kc = nxt % k_tiles * bk
                    buf = (s + lead) % stages
                    tv.copy_async(xa[buf], gxt, [kc, m_c * bm])
                    tv.copy_async(xb[buf], gxt, [kc, m_c * bm + hm])
                    tv.copy_async(ws[buf], gwt, [n_c * bn, kc])
                    tv.copy_async_commit()
            n_t, m_t = _tile_of(pid + i * P, tiles_n, tiles_m, group_m)
            if wide:
                for h, acc in enumerate((acc_a, acc_b)):
                    tile = tv.view(tv.cast(acc, act), act, [hm, bn], acc_layout.permute((1, 0)))
                    tv.sync()  # every consumer is done reading `out` (the half before)
                    tv.store_shared(out, tile)
                    tv.sync()
                    tv.store_global(tv.global_view(y, [M, N]),
                                    tv.load_shared(out, [0, 0], [hm, bn], layout=rows),
                                    [m_t * bm + h * hm, n_t * bn])
            else:
                gy = tv.global_view(y, [N, M], strides=[1, N])
                tv.store_global(gy, tv.cast(acc_a, act), [n_t * bn, m_t * bm])
                tv.store_global(gy, tv.cast(acc_b, act), [n_t * bn, m_t * bm + hm])
        tv.copy_async_wait(0)

    ppwide.name = f"ppwide_{act.name}"
    return ppwide
