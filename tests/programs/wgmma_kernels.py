"""Kernels of the `dot`-with-a-shared-b tests (wgmma on sm_90a; the interpreter anywhere)."""

from tilevm.layouts.shared_layout import swizzled
from tilevm.vm import lang as tv


@tv.kernel(num_warps=4)
def shared_b_matmul(a: tv.ptr(tv.f16, const=True), bt: tv.ptr(tv.f16, const=True),
                    y: tv.ptr(tv.f32), M: tv.int32, N: tv.int32, K: tv.int32,
                    *, bm: int = 64, bn: int = 64, bk: int = 64, num_warps: int = 4,
                    act=tv.f16, through_shared: bool = False):
    """y[M, N] = a[M, K] @ bt[N, K]^T: each k-tile of b^T is stored into a K-major shared
    tile `[bk, bn]` (b's columns contiguous) that `dot` reads in place. With
    `through_shared` the result goes through a shared tile of the planner's layout (for
    64 f32 columns, 256-byte rows swizzled with a period of 2048 bytes) on its way out."""
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
    if through_shared:
        out = tv.alloc_shared(tv.f32, [bm, bn])
        tv.store_shared(out, acc)
        tv.sync()
        acc = tv.load_shared(out, [0, 0], [bm, bn])
    tv.store_global(tv.global_view(y, [M, N]), acc, [m0, n0])


@tv.kernel(num_warps=4)
def shared_ab_matmul(a: tv.ptr(tv.f16, const=True), bt: tv.ptr(tv.f16, const=True),
                     y: tv.ptr(tv.f32), M: tv.int32, N: tv.int32, K: tv.int32,
                     *, bm: int = 64, bn: int = 64, bk: int = 64, num_warps: int = 4):
    """y[M, N] = a[M, K] @ bt[N, K]^T with both operands of `dot` in shared memory: each
    k-tile of a in a K-major tile `[bm, bk]` (a's rows contiguous), of b^T in `[bk, bn]`."""
    tv.grid(tv.cdiv(N, bn), tv.cdiv(M, bm))
    m0 = tv.block_idx(1) * bm
    n0 = tv.block_idx(0) * bn
    ga = tv.global_view(a, [M, K])
    gb = tv.global_view(bt, [K, N], strides=[1, K])  # b = bt^T
    as_ = tv.alloc_shared(tv.f16, [bm, bk], layout=swizzled([bm, bk], tv.f16))
    bs = tv.alloc_shared(tv.f16, [bk, bn], layout=swizzled([bn, bk], tv.f16).permute((1, 0)))
    acc = tv.zeros([bm, bn], tv.f32)
    for k0 in tv.range(0, K, bk):
        tv.store_shared(as_, tv.load_global(ga, [m0, k0], [bm, bk]))
        tv.store_shared(bs, tv.load_global(gb, [k0, n0], [bk, bn]))
        tv.sync()
        acc = tv.dot(as_, bs, acc)
        tv.sync()  # every warpgroup has read both tiles before they are refilled
    tv.store_global(tv.global_view(y, [M, N]), acc, [m0, n0])


@tv.kernel(num_warps=4)
def ring_matmul(a: tv.ptr(tv.f16, const=True), bt: tv.ptr(tv.f16, const=True),
                y: tv.ptr(tv.f32), M: tv.int32, N: tv.int32, K: tv.int32,
                *, bm: int = 64, bn: int = 64, bk: int = 64, stages: int = 3, lead: int = 1):
    """y[M, N] = a[M, K] @ bt[N, K]^T with the k-tiles of b^T copied `lead` k-tiles ahead
    into a ring of `stages` shared tiles. With `lead < stages - 1` the copy after each
    barrier refills a tile read two or more k-tiles back, so the previous k-tile's
    wgmmas may stay in flight across the barrier. (K % 8 == 0: 16-byte rows of b^T, so
    on sm_90a the copies go through TMA.)"""
    tv.assume(K % 8 == 0)
    tv.grid(tv.cdiv(N, bn), tv.cdiv(M, bm))
    m0 = tv.block_idx(1) * bm
    n0 = tv.block_idx(0) * bn
    ga = tv.global_view(a, [M, K])
    gb = tv.global_view(bt, [K, N], strides=[1, K])
    layout = swizzled([bn, bk], tv.f16).permute((1, 0))
    bs = [tv.alloc_shared(tv.f16, [bk, bn], layout=layout) for _ in range(stages)]
    for first in range(lead):
        tv.copy_async(bs[first], gb, [first * bk, n0])
        tv.copy_async_commit()
    acc = tv.zeros([bm, bn], tv.f32)
    for k0 in tv.range(0, K, stages * bk):
        for s in range(stages):  # unrolled: tile s holds k-tile k0 + s * bk
            k = k0 + s * bk
            tv.copy_async_wait(lead - 1)
            tv.sync()
            tv.copy_async(bs[(s + lead) % stages], gb, [k + lead * bk, n0])
            tv.copy_async_commit()
            acc = tv.dot(tv.load_global(ga, [m0, k], [bm, bk]), bs[s], acc)
    tv.copy_async_wait(0)
    tv.store_global(tv.global_view(y, [M, N]), acc, [m0, n0])


@tv.kernel(num_warps=4)
def two_tiles(a: tv.ptr(tv.f16, const=True), y: tv.ptr(tv.f32)):
    """Two wgmma `dot`s on two shared tiles, the second written after the first `dot`
    (the wait analysis's test: whether the barrier before that write waits depends on
    whether the tiles' bytes overlap)."""
    ga = tv.global_view(a, [64, 64])
    b1 = tv.alloc_shared(tv.f16, [64, 64], layout=swizzled([64, 64], tv.f16).permute((1, 0)))
    b2 = tv.alloc_shared(tv.f16, [64, 64], layout=swizzled([64, 64], tv.f16).permute((1, 0)))
    x = tv.load_global(ga, [0, 0], [64, 64])
    tv.store_shared(b1, x)
    tv.sync()
    acc = tv.dot(x, b1, tv.zeros([64, 64], tv.f32))
    tv.sync()
    tv.store_shared(b2, x)
    tv.sync()
    acc = tv.dot(x, b2, acc)
    tv.store_global(tv.global_view(y, [64, 64]), acc, [0, 0])
