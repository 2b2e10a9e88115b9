"""Kernels for the tensor-core `dot` tests (kernels must live in files: their source is
read). `out[M, N] = a[M, K] @ b[K, N] + c[M, N]` over a grid of `bm x bn` tiles with a
runtime k-loop, in several input / accumulator dtypes, plus variants whose operands
reach the `dot` through a `cast` / `elementwise`, or carry a conflicting layout."""

import tilevm as tv
from tilevm.layouts import spatial


def _setup(a, b, c, out, M, N, K, bm, bn):
    """Views, the block's corner and the accumulator (a helper: it runs at compile time;
    the k-loop must be written in the kernel itself)."""
    tv.grid(tv.cdiv(M, bm), tv.cdiv(N, bn))
    ga, gb = tv.global_view(a, [M, K]), tv.global_view(b, [K, N])
    gc, go = tv.global_view(c, [M, N]), tv.global_view(out, [M, N])
    m0, n0 = tv.block_idx(0) * bm, tv.block_idx(1) * bn
    return ga, gb, go, m0, n0, tv.load_global(gc, [m0, n0], [bm, bn])


@tv.kernel(num_warps=4)
def dot_f16(a: tv.ptr("f16", const=True), b: tv.ptr("f16", const=True),
            c: tv.ptr("f32", const=True), out: tv.ptr("f32"), M: tv.int32, N: tv.int32,
            K: tv.int32, *, bm: int = 32, bn: int = 64, bk: int = 32, num_warps: int = 4):
    """f16 x f16 + f32 -> f32."""
    ga, gb, go, m0, n0, acc = _setup(a, b, c, out, M, N, K, bm, bn)
    for k0 in tv.range(0, K, bk):
        ta = tv.load_global(ga, [m0, k0], [bm, bk])
        tb = tv.load_global(gb, [k0, n0], [bk, bn])
        acc = tv.dot(ta, tb, acc)
    tv.store_global(go, acc, [m0, n0])


@tv.kernel(num_warps=4)
def dot_bf16(a: tv.ptr("bf16", const=True), b: tv.ptr("bf16", const=True),
             c: tv.ptr("f32", const=True), out: tv.ptr("f32"), M: tv.int32, N: tv.int32,
             K: tv.int32, *, bm: int = 64, bn: int = 32, bk: int = 16, num_warps: int = 4):
    """bf16 x bf16 + f32 -> f32."""
    ga, gb, go, m0, n0, acc = _setup(a, b, c, out, M, N, K, bm, bn)
    for k0 in tv.range(0, K, bk):
        ta = tv.load_global(ga, [m0, k0], [bm, bk])
        tb = tv.load_global(gb, [k0, n0], [bk, bn])
        acc = tv.dot(ta, tb, acc)
    tv.store_global(go, acc, [m0, n0])


@tv.kernel(num_warps=4)
def dot_f16_acc16(a: tv.ptr("f16", const=True), b: tv.ptr("f16", const=True),
                  c: tv.ptr("f16", const=True), out: tv.ptr("f16"), M: tv.int32,
                  N: tv.int32, K: tv.int32, *, bm: int = 32, bn: int = 32, bk: int = 32,
                  num_warps: int = 4):
    """f16 x f16 + f16 -> f16 (each dot sums in f32 and rounds once)."""
    ga, gb, go, m0, n0, acc = _setup(a, b, c, out, M, N, K, bm, bn)
    for k0 in tv.range(0, K, bk):
        ta = tv.load_global(ga, [m0, k0], [bm, bk])
        tb = tv.load_global(gb, [k0, n0], [bk, bn])
        acc = tv.dot(ta, tb, acc)
    tv.store_global(go, acc, [m0, n0])


@tv.kernel(num_warps=4)
def dot_int8(a: tv.ptr("int8", const=True), b: tv.ptr("int8", const=True),
             c: tv.ptr("int32", const=True), out: tv.ptr("int32"), M: tv.int32, N: tv.int32,
             K: tv.int32, *, bm: int = 32, bn: int = 32, bk: int = 64, num_warps: int = 4):
    """int8 x int8 + int32 -> int32 (m16n8k32)."""
    ga, gb, go, m0, n0, acc = _setup(a, b, c, out, M, N, K, bm, bn)
    for k0 in tv.range(0, K, bk):
        ta = tv.load_global(ga, [m0, k0], [bm, bk])
        tb = tv.load_global(gb, [k0, n0], [bk, bn])
        acc = tv.dot(ta, tb, acc)
    tv.store_global(go, acc, [m0, n0])


@tv.kernel(num_warps=4)
def dot_uint8(a: tv.ptr("uint8", const=True), b: tv.ptr("uint8", const=True),
              c: tv.ptr("int32", const=True), out: tv.ptr("int32"), M: tv.int32, N: tv.int32,
              K: tv.int32, *, bm: int = 16, bn: int = 64, bk: int = 32, num_warps: int = 4):
    """uint8 x uint8 + int32 -> int32 (m16n8k32)."""
    ga, gb, go, m0, n0, acc = _setup(a, b, c, out, M, N, K, bm, bn)
    for k0 in tv.range(0, K, bk):
        ta = tv.load_global(ga, [m0, k0], [bm, bk])
        tb = tv.load_global(gb, [k0, n0], [bk, bn])
        acc = tv.dot(ta, tb, acc)
    tv.store_global(go, acc, [m0, n0])


def _widen_and_scale(ta, tb):
    return tv.cast(ta, tv.f16), tb * 0.5


@tv.kernel(num_warps=4)
def dot_through_cast(a: tv.ptr("f32", const=True), b: tv.ptr("f16", const=True),
                     c: tv.ptr("f32", const=True), out: tv.ptr("f32"), M: tv.int32,
                     N: tv.int32, K: tv.int32, *, bm: int = 32, bn: int = 32, bk: int = 16,
                     num_warps: int = 4):
    """a loaded as f32 and cast to f16, b scaled by 0.5: the fragment layouts reach the
    loads backwards through `cast` and `elementwise`."""
    ga, gb, go, m0, n0, acc = _setup(a, b, c, out, M, N, K, bm, bn)
    for k0 in tv.range(0, K, bk):
        ta = tv.load_global(ga, [m0, k0], [bm, bk])
        tb = tv.load_global(gb, [k0, n0], [bk, bn])
        ta, tb = _widen_and_scale(ta, tb)
        acc = tv.dot(ta, tb, acc)
    tv.store_global(go, acc, [m0, n0])


def _pin_a(ta, tb):
    tv.annotate_layout(ta, spatial(32, 4).local(1, 8))
    return ta, tb


@tv.kernel(num_warps=4)
def dot_pinned_layout(a: tv.ptr("f16", const=True), b: tv.ptr("f16", const=True),
                      c: tv.ptr("f32", const=True), out: tv.ptr("f32"), M: tv.int32,
                      N: tv.int32, K: tv.int32, *, bm: int = 32, bn: int = 32, bk: int = 32,
                      num_warps: int = 4):
    """a's layout is pinned to a row layout that is not the mma tiling: an error."""
    ga, gb, go, m0, n0, acc = _setup(a, b, c, out, M, N, K, bm, bn)
    for k0 in tv.range(0, K, bk):
        ta = tv.load_global(ga, [m0, k0], [bm, bk])
        tb = tv.load_global(gb, [k0, n0], [bk, bn])
        ta, tb = _pin_a(ta, tb)
        acc = tv.dot(ta, tb, acc)
    tv.store_global(go, acc, [m0, n0])


@tv.kernel(num_warps=4)
def dot_f32(a: tv.ptr("f32", const=True), b: tv.ptr("f32", const=True),
            c: tv.ptr("f32", const=True), out: tv.ptr("f32"), M: tv.int32, N: tv.int32,
            K: tv.int32, *, bm: int = 32, bn: int = 32, bk: int = 32, num_warps: int = 4):
    """f32 inputs: no exact tensor-core instruction (an error on the GPU backend)."""
    ga, gb, go, m0, n0, acc = _setup(a, b, c, out, M, N, K, bm, bn)
    for k0 in tv.range(0, K, bk):
        ta = tv.load_global(ga, [m0, k0], [bm, bk])
        tb = tv.load_global(gb, [k0, n0], [bk, bn])
        acc = tv.dot(ta, tb, acc)
    tv.store_global(go, acc, [m0, n0])
