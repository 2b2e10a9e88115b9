"""Kernels of the `tv.assume` tests (kernels must live in files: their source is read)."""

import tilevm as tv


@tv.kernel(num_warps=2)
def add_2d_assumed(a: tv.ptr("f32", const=True), b: tv.ptr("f32", const=True),
                   c: tv.ptr("f32"), M: tv.int32, N: tv.int32, *, bm: int = 16, bn: int = 32,
                   assume: bool = True):
    """c = a + b over 2-D tiles; with `assume`, rows of stride N are 16-byte aligned."""
    if assume:
        tv.assume(N % 4 == 0)
    tv.grid(tv.cdiv(M, bm), tv.cdiv(N, bn))
    ga, gb, gc = tv.global_view(a, [M, N]), tv.global_view(b, [M, N]), tv.global_view(c, [M, N])
    m0, n0 = tv.block_idx(0) * bm, tv.block_idx(1) * bn
    ta = tv.load_global(ga, [m0, n0], [bm, bn])
    tb = tv.load_global(gb, [m0, n0], [bm, bn])
    tv.store_global(gc, ta + tb, [m0, n0])


@tv.kernel(num_warps=1)
def copy_assumed(x: tv.ptr("f32", const=True), y: tv.ptr("f32"), n: tv.int32, k: tv.int32,
                 *, block: int = 128, cond: object = None):
    """y = x; assumes `(n % 8 == 0) & (k > 0)` (or the compile-time `cond` if given)."""
    if cond is None:
        tv.assume((n % 8 == 0) & (k > 0))
    else:
        tv.assume(cond)
    tv.grid(tv.cdiv(n, block))
    gx, gy = tv.global_view(x, [n]), tv.global_view(y, [n])
    off = tv.block_idx(0) * block
    tv.store_global(gy, tv.load_global(gx, [off], [block]), [off])


@tv.kernel(num_warps=1)
def assume_in_loop(x: tv.ptr("f32"), n: tv.int32, *, block: int = 32):
    """An assume inside a runtime loop that fails on the third iteration."""
    tv.grid(1)
    gx = tv.global_view(x, [n])
    for i in tv.range(0, 4):
        tv.assume(i < 2)
        tv.store_global(gx, tv.full([block], 1.0, tv.f32), [0])


@tv.kernel(num_warps=1)
def assume_tile(x: tv.ptr("f32"), n: tv.int32, *, block: int = 32):
    """Passes a tile to tv.assume (an error)."""
    tv.grid(1)
    t = tv.load_global(tv.global_view(x, [n]), [0], [block])
    tv.assume(t > 0)


@tv.kernel(num_warps=1)
def assume_int(x: tv.ptr("f32"), n: tv.int32, *, block: int = 32):
    """Passes an int scalar to tv.assume (an error: it needs a bool)."""
    tv.grid(1)
    tv.assume(n % 8)
