"""Kernels for the `reduce` and `view` lowerings (kernels must live in files: their
source is read). tests/backend/test_backend_reduce_view.py compiles them and runs them against
the interpreter."""

import tilevm as tv
from tilevm.layouts import local, replicated

# ---- reductions --------------------------------------------------------------------------


def make_row_reduce(dtype):
    """Per row of an [M, N] matrix (N <= cols): its sum, max and min. The default layout
    spreads a row over the 32 lanes of a warp: the reductions are warp shuffles."""

    @tv.kernel(num_warps=4)
    def row_reduce(x: tv.ptr(dtype, const=True), s: tv.ptr(dtype), hi: tv.ptr(dtype),
                   lo: tv.ptr(dtype), M: tv.int32, N: tv.int32, *, rows: int = 8,
                   cols: int = 128):
        tv.grid(tv.cdiv(M, rows))
        gx = tv.global_view(x, [M, N])
        gs, gh, gl = (tv.global_view(p, [M, 1]) for p in (s, hi, lo))
        row = tv.block_idx(0) * rows
        t0 = tv.load_global(gx, [row, 0], [rows, cols], other=0.0)
        tmax = tv.load_global(gx, [row, 0], [rows, cols], other=float("-inf"))
        tmin = tv.load_global(gx, [row, 0], [rows, cols], other=float("inf"))
        tv.store_global(gs, tv.sum(t0, 1, keepdim=True), [row, 0])
        tv.store_global(gh, tv.max(tmax, dim=1, keepdim=True), [row, 0])
        tv.store_global(gl, tv.min(tmin, dim=1, keepdim=True), [row, 0])

    row_reduce.name = f"row_reduce_{dtype}"
    return row_reduce


row_reduce_f32 = make_row_reduce(tv.f32)
row_reduce_f16 = make_row_reduce(tv.f16)


def make_col_reduce(dtype, num_warps: int = 4, tile_rows: int = 64):
    """Per column of an [M, N] matrix (M <= rows): its sum, max and min. The default
    layout of a [64, 32] tile over 128 threads puts 16 rows on the thread index, 4 of them
    inside a warp and 4 across the warps: shuffles, then a shared-memory exchange. With 3
    warps and 48 rows the rows' thread digit has 12 values (not a power of two): all of
    it goes through shared memory."""

    @tv.kernel(num_warps=num_warps)
    def col_reduce(x: tv.ptr(dtype, const=True), s: tv.ptr(dtype), hi: tv.ptr(dtype),
                   lo: tv.ptr(dtype), M: tv.int32, N: tv.int32, *, rows: int = tile_rows,
                   cols: int = 32):
        tv.grid(tv.cdiv(N, cols))
        gx = tv.global_view(x, [M, N])
        gs, gh, gl = (tv.global_view(p, [N]) for p in (s, hi, lo))
        col = tv.block_idx(0) * cols
        t = tv.load_global(gx, [0, col], [rows, cols], other=0)
        tv.store_global(gs, tv.sum(t, 0), [col])
        tv.store_global(gh, tv.max(t, dim=0), [col])
        tv.store_global(gl, tv.min(t, dim=0), [col])

    col_reduce.name = f"col_reduce_{dtype}"
    return col_reduce


col_reduce_f32 = make_col_reduce(tv.f32)
col_reduce_i32 = make_col_reduce(tv.int32)
col_reduce_3warps = make_col_reduce(tv.f32, num_warps=3, tile_rows=48)
col_reduce_3warps.name = "col_reduce_3warps"


@tv.kernel(num_warps=4)
def rows_in_registers(x: tv.ptr("f32", const=True), s: tv.ptr("f32"), M: tv.int32, N: tv.int32,
                      *, rows: int = 128, cols: int = 8):
    """Each thread holds a whole row (layout spatial(128, 1).local(1, 8)): the sum is
    in-thread only, no shuffle."""
    tv.grid(tv.cdiv(M, rows))
    gx, gs = tv.global_view(x, [M, N]), tv.global_view(s, [M])
    row = tv.block_idx(0) * rows
    t = tv.load_global(gx, [row, 0], [rows, cols], layout=local(1, 1).spatial(rows, 1)
                       .local(1, cols))
    tv.store_global(gs, tv.sum(t, 1), [row])


# ---- views of packed sub-byte data -------------------------------------------------------


def make_dequantize(wdtype, num_warps: int = 4):
    """`out[K, N] = f16(w) * scale[N]`: `w` is b-bit codes packed along N in bytes
    `[K, N*b/8]` (N a multiple of 8). Each thread loads r row-runs of b bytes (8 codes),
    views them as 8 b-bit codes and converts them to f16."""
    b = wdtype.bits

    @tv.kernel(num_warps=num_warps)
    def dequantize(w: tv.ptr(tv.uint8, const=True), scales: tv.ptr(tv.f16, const=True),
                   out: tv.ptr(tv.f16), K: tv.int32, N: tv.int32, *, bk: int = 32,
                   bn: int = 64):
        t1 = bn // 8
        t0 = num_warps * 32 // t1
        r = bk // t0
        byte_layout = local(r, 1).spatial(t0, t1).local(1, b)  # [bk, bn*b/8] bytes
        code_layout = local(r, 1).spatial(t0, t1).local(1, 8)  # [bk, bn] b-bit codes
        tv.grid(tv.cdiv(K, bk), tv.cdiv(N, bn))
        gw = tv.global_view(w, [K, N * b // 8])
        gs = tv.global_view(scales, [1, N])
        go = tv.global_view(out, [K, N])
        k0 = tv.block_idx(0) * bk
        n0 = tv.block_idx(1) * bn
        packed = tv.load_global(gw, [k0, tv.block_idx(1) * (bn * b // 8)],
                                [bk, bn * b // 8], layout=byte_layout)
        codes = tv.view(packed, wdtype, [bk, bn], code_layout)
        # The scales of the thread's 8 columns (replicated over the t0 rows of threads).
        scale = tv.load_global(gs, [0, n0], [1, bn],
                               layout=replicated(t0, ndim=2).spatial(1, t1).local(1, 8))
        tv.store_global(go, tv.cast(codes, tv.f16) * scale, [k0, n0])

    dequantize.name = f"dequantize_{wdtype}"
    return dequantize


DEQUANT_DTYPES = ("int3", "int4", "uint4", "int8", "f4e2m1", "f6e3m2", "f8e4m3", "int5",
                  "uint2", "f3e1m1", "f8e5m2", "uint7")
dequantize = {name: make_dequantize(tv.dtypes.parse(name)) for name in DEQUANT_DTYPES}


def make_repack(wdtype):
    """Bytes -> b-bit codes -> bytes (a view and its inverse): `out` equals `w`. The
    codes are also widened to int32 (cast) and stored, checking the held values."""
    b = wdtype.bits

    @tv.kernel(num_warps=2)
    def repack(w: tv.ptr(tv.uint8, const=True), out: tv.ptr(tv.uint8),
               vals: tv.ptr(tv.f32), K: tv.int32, *, bk: int = 64):
        byte_layout = local(1, 1).spatial(bk, 1).local(1, b)
        code_layout = local(1, 1).spatial(bk, 1).local(1, 8)
        tv.grid(tv.cdiv(K, bk))
        gw, go = tv.global_view(w, [K, b]), tv.global_view(out, [K, b])
        gv = tv.global_view(vals, [K, 8])
        k0 = tv.block_idx(0) * bk
        packed = tv.load_global(gw, [k0, 0], [bk, b], layout=byte_layout)
        codes = tv.view(packed, wdtype, [bk, 8], code_layout)
        tv.store_global(gv, tv.cast(codes, tv.f32), [k0, 0])
        tv.store_global(go, tv.view(codes, tv.uint8, [bk, b], byte_layout), [k0, 0])

    repack.name = f"repack_{wdtype}"
    return repack


REPACK_DTYPES = ("int3", "uint5", "int6", "uint1", "int7", "f6e2m3")
repack = {name: make_repack(tv.dtypes.parse(name)) for name in REPACK_DTYPES}


@tv.kernel(num_warps=1)
def half_bytes(x: tv.ptr("f16", const=True), out: tv.ptr("uint8"), n: tv.int32,
               *, block: int = 256):
    """The bytes of f16 values: a view from 16-bit to 8-bit elements (little-endian)."""
    tv.grid(tv.cdiv(n, block))
    gx, go = tv.global_view(x, [n]), tv.global_view(out, [2 * n])
    off = tv.block_idx(0) * block
    t = tv.load_global(gx, [off], [block], layout=local(1).spatial(32).local(8))
    tv.store_global(go, tv.view(t, tv.uint8, [2 * block], local(1).spatial(32).local(16)),
                    [2 * off])


@tv.kernel(num_warps=4)
def block_total(x: tv.ptr("f32", const=True), s: tv.ptr("f32"), hi: tv.ptr("f32"),
                n: tv.int32, *, block: int = 1024):
    """The sum and max of each block of a vector: the one thread digit of the 1-d tile
    (128 threads) straddles the warp boundary: 5 shuffles, then 4 warps in shared memory."""
    tv.grid(tv.cdiv(n, block))
    gx = tv.global_view(x, [n])
    gs, gh = tv.global_view(s, [tv.cdiv(n, block)]), tv.global_view(hi, [tv.cdiv(n, block)])
    i = tv.block_idx(0)
    t = tv.load_global(gx, [i * block], [block], other=0.0)
    tv.store_global(gs, tv.sum(t, 0, keepdim=True), [i])
    tv.store_global(gh, tv.max(t, dim=0, keepdim=True), [i])


@tv.kernel(num_warps=1)
def reduce_codes(w: tv.ptr(tv.uint8, const=True), s: tv.ptr(tv.int32)):
    """Not lowered: a reduction of int4 codes (they must be cast first)."""
    codes = tv.view(tv.load_global(tv.global_view(w, [32, 4]), [0, 0], [32, 4],
                                   layout=local(1, 1).spatial(32, 1).local(1, 4)),
                    tv.int4, [32, 8], local(1, 1).spatial(32, 1).local(1, 8))
    tv.store_global(tv.global_view(s, [32]), tv.cast(tv.sum(codes, 1), tv.int32), [0])
