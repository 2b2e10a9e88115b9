"""Experiment: where does the wide epilogue's swizzled shared tile go wrong on the H100?

`wt_mm` is `kernels.qmm_dequant.wt_matmul` (f16, 256 x 128 tiles) with the epilogue
chosen by constants: `tile` the shared layout of y's tile ("direct": none, "padded",
"swizzled": the planner's default, "rowmajor": unswizzled, unpadded), `free` whether the
stage buffers are freed (the tile reuses their bytes), `src` where the stored values come
from ("acc": the wgmma accumulator, "global": loaded from `ref` in the accumulator's
layout; the view below reads `ref` as y, not y^T as `run_exp.py` passes it, so that
variant's results were wrong whatever the tile).
"""

from tilevm.kernels.qmm_dequant import grouped_tiles
from tilevm.layouts import local, spatial
from tilevm.layouts.fragments import mma_m16n8k16_c
from tilevm.layouts.shared_layout import SharedLayout, swizzled
from tilevm.vm import lang as tv

act = tv.f16


@tv.kernel(num_warps=8)
def wt_mm(x: tv.ptr(act, const=True), wt: tv.ptr(act, const=True), y: tv.ptr(act),
          ref: tv.ptr(tv.f32, const=True), M: tv.int32, N: tv.int32, K: tv.int32,
          *, bm: int = 256, bk: int = 64, num_warps: int = 8, stages: int = 4,
          lead: int = 2, group_m: int = 8, tile: str = "swizzled", free: bool = True,
          src: str = "acc", fence: bool = False):
    bn = 16 * num_warps
    tv.assume(K % 32 == 0)
    tv.assume(N % 8 == 0)
    tv.grid(tv.cdiv(N, bn), tv.cdiv(M, bm))
    n_tile, m_tile = grouped_tiles(tv.cdiv(N, bn), tv.cdiv(M, bm), group_m)
    n0, m0 = n_tile * bn, m_tile * bm
    gxt = tv.global_view(x, [K, M], strides=[1, K])
    gwt = tv.global_view(wt, [N, K])
    acc_layout = spatial(num_warps, 1) * local(1, bm // 8) * mma_m16n8k16_c()
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
            tv.copy_async(xs[(s + lead) % stages], gxt, [k + lead * bk, m0])
            tv.copy_async(ws[(s + lead) % stages], gwt, [n0, k + lead * bk])
            tv.copy_async_commit()
    tv.copy_async_wait(0)
    if src == "global":
        acc = tv.load_global(tv.global_view(ref, [N, M], strides=[1, N]), [n0, m0], [bn, bm],
                             layout=acc_layout)
    if tile == "direct":
        tv.store_global(tv.global_view(y, [N, M], strides=[1, N]), tv.cast(acc, act),
                        [n0, m0])
        return
    threads = 32 * num_warps
    per_row = bn // 8
    v = tv.view(tv.cast(acc, act), act, [bm, bn], acc_layout.permute((1, 0)))
    if free:
        for buf in (*xs, *ws):
            tv.free_shared(buf)
    tv.sync()
    if tile == "padded":
        out = tv.alloc_shared(act, [bm, bn], layout=SharedLayout((bm, bn), (bn + 4, 1), 16))
    elif tile == "swizzled":
        out = tv.alloc_shared(act, [bm, bn], layout=swizzled([bm, bn], act))
    else:
        out = tv.alloc_shared(act, [bm, bn], layout=SharedLayout((bm, bn), (bn, 1), 16))
    tv.store_shared(out, v)
    tv.sync()
    rows = local(bm * bn // (8 * threads), 1).spatial(threads // per_row, per_row).local(1, 8)
    tv.store_global(tv.global_view(y, [M, N]),
                    tv.load_shared(out, [0, 0], [bm, bn], layout=rows), [m0, n0])
