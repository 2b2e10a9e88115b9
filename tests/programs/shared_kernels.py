"""Kernels that move tiles through shared memory, for tests/backend/test_backend_shared.py (kernels
must live in files: their source is read)."""

import tilevm as tv
from tilevm.layouts import local
from tilevm.layouts.shared_layout import row_major, swizzled


@tv.kernel(num_warps=4)
def transpose(x: tv.ptr("f16", const=True), y: tv.ptr("f16"), M: tv.int32, N: tv.int32,
              *, bm: int = 64, bn: int = 64):
    """y[N, M] = x[M, N]^T, one [bn, bm] tile of y per block, through a swizzled shared
    tile: each thread reads runs of 8 along x's rows (dim 0 of the transposed view),
    writes them down a column of the shared tile, and reads the tile back as 16-byte
    row vectors."""
    tv.grid(tv.cdiv(M, bm), tv.cdiv(N, bn))
    gxt = tv.global_view(x, [N, M], strides=[1, N])  # x seen transposed
    gy = tv.global_view(y, [N, M])
    m0, n0 = tv.block_idx(0) * bm, tv.block_idx(1) * bn
    column_runs = local(1, bm // 16).spatial(bn // 8, 16).local(8, 1)
    tile = tv.load_global(gxt, [n0, m0], [bn, bm], layout=column_runs)
    s = tv.alloc_shared(tv.f16, [bn, bm])  # planned: swizzled
    tv.store_shared(s, tile, [0, 0])
    tv.sync()
    tv.store_global(gy, tv.load_shared(s, [0, 0], [bn, bm]), [n0, m0])


@tv.kernel(num_warps=4)
def async_copy_f16(x: tv.ptr("f16", const=True), y: tv.ptr("f16"), M: tv.int32, N: tv.int32,
                   ld8: tv.int32, *, bm: int = 32, bn: int = 64, aligned: bool = True):
    """y = x for [M, N] matrices with row stride `ld8 * 8` (provably 16-byte aligned rows)
    or N (`aligned=False`): a band of `bm` rows per block, `bn` columns at a time, two
    stages deep (the copy of the next tile is in flight while the current one is
    stored). Ragged M and N: zero-filled and partial chunks."""
    gx, gy, m0, stages = _copy_setup(x, y, M, N, ld8, tv.f16, bm, bn, aligned)
    for k0 in tv.range(0, N, 2 * bn):
        _copy_stages(gx, gy, m0, k0, stages, bm, bn)
    tv.copy_async_wait(0)


@tv.kernel(num_warps=4)
def async_copy_f32(x: tv.ptr("f32", const=True), y: tv.ptr("f32"), M: tv.int32, N: tv.int32,
                   ld8: tv.int32, *, bm: int = 16, bn: int = 32, aligned: bool = True):
    gx, gy, m0, stages = _copy_setup(x, y, M, N, ld8, tv.f32, bm, bn, aligned)
    for k0 in tv.range(0, N, 2 * bn):
        _copy_stages(gx, gy, m0, k0, stages, bm, bn)
    tv.copy_async_wait(0)


@tv.kernel(num_warps=4)
def async_copy_int8(x: tv.ptr("int8", const=True), y: tv.ptr("int8"), M: tv.int32,
                    N: tv.int32, ld8: tv.int32, *, bm: int = 32, bn: int = 64,
                    aligned: bool = True):
    gx, gy, m0, stages = _copy_setup(x, y, M, N, ld8, tv.int8, bm, bn, aligned)
    for k0 in tv.range(0, N, 2 * bn):
        _copy_stages(gx, gy, m0, k0, stages, bm, bn)
    tv.copy_async_wait(0)


def _copy_setup(x, y, M, N, ld8, dtype, bm, bn, aligned):
    tv.grid(tv.cdiv(M, bm))
    ld = ld8 * 8 if aligned else N
    gx = tv.global_view(x, [M, N], strides=[ld, 1])
    gy = tv.global_view(y, [M, N], strides=[ld, 1])
    m0 = tv.block_idx(0) * bm
    stages = [tv.alloc_shared(dtype, [bm, bn]) for _ in range(2)]
    tv.copy_async(stages[0], gx, [m0, 0])
    tv.copy_async_commit()
    return gx, gy, m0, stages


def _copy_stages(gx, gy, m0, k0, stages, bm, bn):
    for s in range(2):  # unrolled: stage s holds the tile at k0 + s * bn
        k = k0 + s * bn if s else k0
        tv.copy_async(stages[1 - s], gx, [m0, k + bn])  # prefetch (zeros past N)
        tv.copy_async_commit()
        tv.copy_async_wait(1)
        tv.sync()
        tv.store_global(gy, tv.load_shared(stages[s], [0, 0], [bm, bn]), [m0, k])
        tv.sync()


@tv.kernel(num_warps=4)
def transposed_stage(x: tv.ptr("f16", const=True), y: tv.ptr("f16"), M: tv.int32,
                     K: tv.int32, ld8: tv.int32, *, bm: int = 64, bk: int = 64,
                     aligned: bool = True, swizzle: bool = True, multiple: int = 1):
    """y[K, Mp] = x[M, K]^T, zeros in the columns M..Mp-1 (Mp: M rounded up to `bm`).

    x has row stride `ld8 * 8` (provably 16-byte aligned rows), or K (`aligned=False`).
    One [bk, bm] tile per block is staged by `copy_async` from x seen transposed (view
    strides [1, ld]) into a tile whose dimension 0 is contiguous: the transpose of the
    ldmatrix-swizzled [bm, bk] layout (or of the row-major one, `swizzle=False`), so the
    copy runs in 16-byte chunks along dimension 0, rows of x. Ragged M: zero-filled
    chunks; ragged K: chunks the edge cuts (none when `multiple` is 8: whole chunks)."""
    tv.assume(K % multiple == 0)
    tv.grid(tv.cdiv(K, bk), tv.cdiv(M, bm))
    ld = ld8 * 8 if aligned else K
    gxt = tv.global_view(x, [K, M], strides=[1, ld])
    gy = tv.global_view(y, [K, tv.cdiv(M, bm) * bm])
    k0, m0 = tv.block_idx(0) * bk, tv.block_idx(1) * bm
    rows = swizzled([bm, bk], tv.f16) if swizzle else row_major([bm, bk], tv.f16)
    s = tv.alloc_shared(tv.f16, [bk, bm], layout=rows.permute((1, 0)))
    tv.copy_async(s, gxt, [k0, m0])
    tv.copy_async_commit()
    tv.copy_async_wait(0)
    tv.sync()
    tv.store_global(gy, tv.load_shared(s, [0, 0], [bk, bm]), [k0, m0])


@tv.kernel(num_warps=4)
def roundtrip_f16(x: tv.ptr("f16", const=True), y: tv.ptr("f16"), M: tv.int32, N: tv.int32,
                  *, bm: int = 16, bn: int = 64):
    _roundtrip(x, y, M, N, tv.f16, bm, bn)


@tv.kernel(num_warps=4)
def roundtrip_f32(x: tv.ptr("f32", const=True), y: tv.ptr("f32"), M: tv.int32, N: tv.int32,
                  *, bm: int = 16, bn: int = 32):
    _roundtrip(x, y, M, N, tv.f32, bm, bn)


@tv.kernel(num_warps=4)
def roundtrip_int8(x: tv.ptr("int8", const=True), y: tv.ptr("int8"), M: tv.int32,
                   N: tv.int32, *, bm: int = 16, bn: int = 64):
    _roundtrip(x, y, M, N, tv.int8, bm, bn)


def _roundtrip(x, y, M, N, dtype, bm, bn):
    """y = x by [bm, 2 * bn] tiles: two halves stored into one shared tile at runtime
    offsets, read back whole; then through a second shared tile that reuses the first
    one's bytes (freed), read back as two halves at runtime offsets."""
    tv.grid(tv.cdiv(M, bm), tv.cdiv(N, 2 * bn))
    gx, gy = tv.global_view(x, [M, N]), tv.global_view(y, [M, N])
    m0, n0 = tv.block_idx(0) * bm, tv.block_idx(1) * (2 * bn)
    left = tv.load_global(gx, [m0, n0], [bm, bn])
    right = tv.load_global(gx, [m0, n0 + bn], [bm, bn])
    a = tv.alloc_shared(dtype, [bm, 2 * bn])
    tv.store_shared(a, left, [0, 0])
    tv.store_shared(a, right, [0, bn])
    tv.sync()
    whole = tv.load_shared(a, [0, 0], [bm, 2 * bn])
    tv.sync()
    tv.free_shared(a)
    b = tv.alloc_shared(dtype, [bm, 2 * bn])  # the same bytes as `a`
    tv.store_shared(b, whole, [0, 0])
    tv.sync()
    right2 = tv.load_shared(b, [0, bn], [bm, bn])
    left2 = tv.load_shared(b, [0, 0], [bm, bn])
    tv.store_global(gy, left2, [m0, n0])
    tv.store_global(gy, right2, [m0, n0 + bn])
    tv.free_shared(b)


@tv.kernel(num_warps=4)
def int4_store(y: tv.ptr("int8"), *, rows: int = 8, cols: int = 64):
    """A sub-byte shared tile (not supported by the GPU backend yet)."""
    s = tv.alloc_shared(tv.int4, [rows, cols])
    tv.store_shared(s, tv.full([rows, cols], 3, tv.int4), [0, 0])
    tv.sync()
    codes = tv.cast(tv.load_shared(s, [0, 0], [rows, cols]), tv.int8)
    tv.store_global(tv.global_view(y, [rows, cols]), codes, [0, 0])
