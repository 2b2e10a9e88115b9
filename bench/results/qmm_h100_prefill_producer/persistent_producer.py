"""The persistent matmul of session 18 (`qmm_h100_prefill_dequant/experiment_kernels.py`,
`persistent_gemm_kernel`: P blocks, each its tiles pid, pid + P, ..., the copies of
the next tile's first k-tiles issued during this tile's last) with a producer warp: the
tile arithmetic of the copies (three divisions a k-tile) runs in the producer only."""
# ruff: noqa: E501
from functools import cache

from tilevm.kernels.qmm import activation_type
from tilevm.layouts import local, spatial
from tilevm.layouts.fragments import mma_m16n8k16_c
from tilevm.layouts.shared_layout import swizzled
from tilevm.vm import lang as tv


def _tile_of(tid, tiles_n, tiles_m, group_m):
    per_group = group_m * tiles_n
    first = tid // per_group * group_m
    rows = tv.min(tiles_m - first, group_m)
    return tid % per_group // rows, first + tid % per_group % rows


@cache
def persistent_producer_kernel(act="f16"):
    act = activation_type(act)

    @tv.kernel(num_warps=8)
    def ppgemm(x: tv.ptr(act, const=True), wt: tv.ptr(act, const=True), y: tv.ptr(act),
               M: tv.int32, N: tv.int32, K: tv.int32, P: tv.int32,
               *, bm: int = 256, bk: int = 64, num_warps: int = 8, stages: int = 4,
               lead: int = 3, group_m: int = 8, producer: bool = True):
        bn = 16 * num_warps
        if producer:
            tv.producer_warp()
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
                    # (past this block's last tile: its last tile again, never read;
                    # a producer warp needs a copy in every group)
                    nxt = tv.min(j + lead, total - 1)
                    n_c, m_c = _tile_of(pid + nxt // k_tiles * P, tiles_n, tiles_m,
                                        group_m)
                    kc = nxt % k_tiles * bk
                    tv.copy_async(xs[(s + lead) % stages], gxt, [kc, m_c * bm])
                    tv.copy_async(ws[(s + lead) % stages], gwt, [n_c * bn, kc])
                    tv.copy_async_commit()
            n_t, m_t = _tile_of(pid + i * P, tiles_n, tiles_m, group_m)
            tv.store_global(gy, tv.cast(acc, act), [n_t * bn, m_t * bm])
        tv.copy_async_wait(0)

    ppgemm.name = f"ppgemm_{act.name}"
    return ppgemm
