"""Small kernels the backend tests compile (kernels must live in files: their source is
read). Each uses only instructions the GPU backend lowers today."""

import tilevm as tv


@tv.kernel(num_warps=4)
def scale_relu(x: tv.ptr("f16", const=True), y: tv.ptr("f32"), n: tv.int32, alpha: tv.f32,
               *, block: int = 512, repeats: int = 3):
    """y = leaky_relu(repeats * alpha * x), through a runtime loop with a carried tile."""
    tv.grid(tv.cdiv(n, block))
    gx, gy = tv.global_view(x, [n]), tv.global_view(y, [n])
    off = tv.block_idx(0) * block
    a = tv.cast(tv.load_global(gx, [off], [block]), tv.f32)
    acc = tv.zeros([block], tv.f32)
    for _ in tv.range(0, repeats):
        acc = acc + a * alpha
    tv.store_global(gy, tv.where(acc > 0, acc, acc * 0.125), [off])


@tv.kernel(num_warps=2)
def tile_add_2d(a: tv.ptr("f32", const=True), b: tv.ptr("f32", const=True), c: tv.ptr("f32"),
                M: tv.int32, N: tv.int32, *, bm: int = 16, bn: int = 32):
    """c = a + b over a 2-D grid of tiles, ragged in both dimensions."""
    tv.grid(tv.cdiv(M, bm), tv.cdiv(N, bn))
    ga, gb, gc = tv.global_view(a, [M, N]), tv.global_view(b, [M, N]), tv.global_view(c, [M, N])
    m0, n0 = tv.block_idx(0) * bm, tv.block_idx(1) * bn
    ta = tv.load_global(ga, [m0, n0], [bm, bn])
    tb = tv.load_global(gb, [m0, n0], [bm, bn])
    tv.store_global(gc, ta + tb, [m0, n0])


@tv.kernel(num_warps=4)
def dequant_int8(q: tv.ptr("int8", const=True), s: tv.ptr("f16", const=True),
                 out: tv.ptr("f16"), n: tv.int32, *, block: int = 1024):
    """out = f16(q) * s: integer codes to half, one scale per block."""
    tv.grid(tv.cdiv(n, block))
    gq, gs, go = tv.global_view(q, [n]), tv.global_view(s, [tv.cdiv(n, block)]), \
        tv.global_view(out, [n])
    off = tv.block_idx(0) * block
    scale = tv.load_global(gs, [tv.block_idx(0)], [1])
    values = tv.cast(tv.load_global(gq, [off], [block]), tv.f16)
    tv.store_global(go, values * scale, [off])


@tv.kernel(num_warps=1)
def int_floor_div(x: tv.ptr("int32", const=True), y: tv.ptr("int32"), n: tv.int32,
                  *, block: int = 128):
    """y = (x // 3) * 1000 + x % -7 on int32 tiles: floor division and modulo as Python
    rounds them (toward minus infinity, the remainder with the divisor's sign)."""
    tv.grid(tv.cdiv(n, block))
    gx, gy = tv.global_view(x, [n]), tv.global_view(y, [n])
    off = tv.block_idx(0) * block
    t = tv.load_global(gx, [off], [block])
    tv.store_global(gy, (t // 3) * 1000 + t % -7, [off])
