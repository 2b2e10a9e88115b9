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


def make_dot(name: str, a_dtype: str, b_dtype: str, acc_dtype: str, *, bm: int, bn: int,
             bk: int, prepare=None, doc: str = ""):
    """`out = a @ b + c` with a runtime k-loop; `prepare(ta, tb)` (compile-time Python, if
    given) transforms each k-tile's operands before the `dot`."""

    @tv.kernel(num_warps=4)
    def dot(a: tv.ptr(a_dtype, const=True), b: tv.ptr(b_dtype, const=True),
            c: tv.ptr(acc_dtype, const=True), out: tv.ptr(acc_dtype), M: tv.int32,
            N: tv.int32, K: tv.int32, *, bm: int = bm, bn: int = bn, bk: int = bk,
            num_warps: int = 4):
        ga, gb, go, m0, n0, acc = _setup(a, b, c, out, M, N, K, bm, bn)
        for k0 in tv.range(0, K, bk):
            ta = tv.load_global(ga, [m0, k0], [bm, bk])
            tb = tv.load_global(gb, [k0, n0], [bk, bn])
            if prepare is not None:
                ta, tb = prepare(ta, tb)
            acc = tv.dot(ta, tb, acc)
        tv.store_global(go, acc, [m0, n0])

    dot.name = name
    dot.__doc__ = doc
    return dot


def _widen_and_scale(ta, tb):
    return tv.cast(ta, tv.f16), tb * 0.5


def _pin_a(ta, tb):
    tv.annotate_layout(ta, spatial(32, 4).local(1, 8))
    return ta, tb


dot_f16 = make_dot("dot_f16", "f16", "f16", "f32", bm=32, bn=64, bk=32,
                   doc="f16 x f16 + f32 -> f32.")
dot_bf16 = make_dot("dot_bf16", "bf16", "bf16", "f32", bm=64, bn=32, bk=16,
                    doc="bf16 x bf16 + f32 -> f32.")
dot_f16_acc16 = make_dot("dot_f16_acc16", "f16", "f16", "f16", bm=32, bn=32, bk=32,
                         doc="f16 x f16 + f16 -> f16 (each dot sums in f32, rounds once).")
dot_int8 = make_dot("dot_int8", "int8", "int8", "int32", bm=32, bn=32, bk=64,
                    doc="int8 x int8 + int32 -> int32 (m16n8k32).")
dot_uint8 = make_dot("dot_uint8", "uint8", "uint8", "int32", bm=16, bn=64, bk=32,
                     doc="uint8 x uint8 + int32 -> int32 (m16n8k32).")
dot_through_cast = make_dot(
    "dot_through_cast", "f32", "f16", "f32", bm=32, bn=32, bk=16, prepare=_widen_and_scale,
    doc="a loaded as f32 and cast to f16, b scaled by 0.5: the fragment layouts reach the "
        "loads backwards through `cast` and `elementwise`.")
dot_pinned_layout = make_dot(
    "dot_pinned_layout", "f16", "f16", "f32", bm=32, bn=32, bk=32, prepare=_pin_a,
    doc="a's layout is pinned to a row layout that is not the mma tiling: an error.")
dot_f32 = make_dot("dot_f32", "f32", "f32", "f32", bm=32, bn=32, bk=32,
                   doc="f32 inputs: no exact tensor-core instruction (an error on the GPU "
                       "backend).")
