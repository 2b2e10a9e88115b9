"""Kernels for the layout-conversion tests (tests/backend/test_backend_convert.py): broadcast
operands that layout inference gives the right layout (no conversion), and operands
whose layouts are pinned so that `convert_layouts` must move them through shared memory."""

import tilevm as tv
from tilevm.layouts import local, replicated, spatial


@tv.kernel(num_warps=4)
def scale_rows(x: tv.ptr("f16", const=True), s: tv.ptr("f16", const=True),
               y: tv.ptr("f16"), M: tv.int32, N: tv.int32, *, bm: int = 32, bn: int = 64,
               num_warps: int = 4):
    """`y = x * s[None, :]` with x pinned to a row-run layout: the `[1, bn]` row is loaded
    in that layout reduced over rows (no conversion)."""
    tv.grid(tv.cdiv(M, bm), tv.cdiv(N, bn))
    gx, gy = tv.global_view(x, [M, N]), tv.global_view(y, [M, N])
    gs = tv.global_view(s, [1, N])
    m0, n0 = tv.block_idx(0) * bm, tv.block_idx(1) * bn
    tx = tv.load_global(gx, [m0, n0], [bm, bn], layout=local(2, 1).spatial(16, 8).local(1, 8))
    ts = tv.load_global(gs, [0, n0], [1, bn])
    tv.store_global(gy, tx * ts, [m0, n0])


@tv.kernel(num_warps=4)
def add_pinned(x: tv.ptr("f32", const=True), z: tv.ptr("f32", const=True),
               s: tv.ptr("f32", const=True), y: tv.ptr("f32"), M: tv.int32, N: tv.int32,
               *, bm: int = 32, bn: int = 32, num_warps: int = 4):
    """`y = (x + z) * s[None, :]` with x and z pinned to different layouts and the row
    pinned to a layout the sum cannot read: z and s are converted."""
    tv.grid(tv.cdiv(M, bm), tv.cdiv(N, bn))
    gx, gz, gy = (tv.global_view(p, [M, N]) for p in (x, z, y))
    gs = tv.global_view(s, [1, N])
    m0, n0 = tv.block_idx(0) * bm, tv.block_idx(1) * bn
    tx = tv.load_global(gx, [m0, n0], [bm, bn], layout=local(2, 1).spatial(16, 8).local(1, 4))
    tz = tv.load_global(gz, [m0, n0], [bm, bn], layout=spatial(32, 4).local(1, 8))
    ts = tv.load_global(gs, [0, n0], [1, bn], layout=replicated(4, ndim=2) * spatial(1, 32))
    tv.store_global(gy, (tx + tz) * ts, [m0, n0])


@tv.kernel(num_warps=4)
def dot_pinned(a: tv.ptr("f16", const=True), b: tv.ptr("f16", const=True),
               out: tv.ptr("f32"), M: tv.int32, N: tv.int32, K: tv.int32,
               *, bm: int = 32, bn: int = 32, bk: int = 32, num_warps: int = 4):
    """`out = a @ b` with a and b pinned to row layouts (not the mma tiling): both are
    converted before the `dot`; the accumulator is not."""
    tv.grid(tv.cdiv(M, bm), tv.cdiv(N, bn))
    ga, gb, go = tv.global_view(a, [M, K]), tv.global_view(b, [K, N]), \
        tv.global_view(out, [M, N])
    m0, n0 = tv.block_idx(0) * bm, tv.block_idx(1) * bn
    acc = tv.zeros([bm, bn], tv.f32)
    for k0 in tv.range(0, K, bk):
        ta = tv.load_global(ga, [m0, k0], [bm, bk], layout=spatial(32, 4).local(1, 8))
        tb = tv.load_global(gb, [k0, n0], [bk, bn], layout=spatial(32, 4).local(1, 8))
        acc = tv.dot(ta, tb, acc)
    tv.store_global(go, acc, [m0, n0])


@tv.kernel(num_warps=4)
def dot_pinned_acc(a: tv.ptr("f16", const=True), b: tv.ptr("f16", const=True),
                   out: tv.ptr("f32"), M: tv.int32, N: tv.int32, K: tv.int32,
                   *, bm: int = 32, bn: int = 32, bk: int = 32, num_warps: int = 4):
    """The accumulator is pinned to a row layout: c is converted to the C tiling before
    the `dot` and its result back after it."""
    tv.grid(tv.cdiv(M, bm), tv.cdiv(N, bn))
    ga, gb, go = tv.global_view(a, [M, K]), tv.global_view(b, [K, N]), \
        tv.global_view(out, [M, N])
    m0, n0 = tv.block_idx(0) * bm, tv.block_idx(1) * bn
    acc = tv.zeros([bm, bn], tv.f32, layout=spatial(32, 4).local(1, 8))
    for k0 in tv.range(0, K, bk):
        ta = tv.load_global(ga, [m0, k0], [bm, bk])
        tb = tv.load_global(gb, [k0, n0], [bk, bn])
        acc = tv.dot(ta, tb, acc)
    tv.store_global(go, acc, [m0, n0])
