"""Kernels of the `dot`-with-a-shared-b tests (wgmma on sm_90a; the interpreter anywhere)."""

from tilevm.layouts.shared_layout import swizzled
from tilevm.vm import lang as tv


@tv.kernel(num_warps=4)
def shared_b_matmul(a: tv.ptr(tv.f16, const=True), bt: tv.ptr(tv.f16, const=True),
                    y: tv.ptr(tv.f32), M: tv.int32, N: tv.int32, K: tv.int32,
                    *, bm: int = 64, bn: int = 64, bk: int = 64, num_warps: int = 4,
                    act=tv.f16):
    """y[M, N] = a[M, K] @ bt[N, K]^T: each k-tile of b^T is stored into a K-major shared
    tile `[bk, bn]` (b's columns contiguous) that `dot` reads in place."""
    tv.grid(tv.cdiv(N, bn), tv.cdiv(M, bm))
    m0 = tv.block_idx(1) * bm
    n0 = tv.block_idx(0) * bn
    ga = tv.global_view(a, [M, K])
    gb = tv.global_view(bt, [K, N], strides=[1, K])  # b = bt^T
    bs = tv.alloc_shared(act, [bk, bn], layout=swizzled([bn, bk], act).permute((1, 0)))
    acc = tv.zeros([bm, bn], tv.f32)
    for k0 in tv.range(0, K, bk):
        tv.store_shared(bs, tv.load_global(gb, [k0, n0], [bk, bn]))
        tv.sync()
        acc = tv.dot(tv.load_global(ga, [m0, k0], [bm, bk]), bs, acc)
        tv.sync()  # every warpgroup has read bs before it is refilled
    tv.store_global(tv.global_view(y, [M, N]), acc, [m0, n0])
