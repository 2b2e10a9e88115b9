"""Kernels whose `load_shared`s feed `dot`, for tests/backend/test_backend_ldmatrix.py (kernels
must live in files: their source is read): examples/matmul.py with the A and B tiles
staged through shared memory, so that layout inference gives the `load_shared` outputs
the mma fragment tilings and the backend selects `ldmatrix` (`.trans` for B, stored
[k, n] row-major); and a tile stored from fragment tilings (`stmatrix`)."""

import tilevm as tv
from tilevm.layouts import local, spatial
from tilevm.layouts.fragments import mma_m16n8k16_a, mma_m16n8k16_b
from tilevm.layouts.shared_layout import row_major, swizzled


@tv.kernel(num_warps=4)
def matmul_pipelined(a: tv.ptr(tv.f16, const=True), b: tv.ptr(tv.f16, const=True),
                     c: tv.ptr(tv.f16), M: tv.int32, N: tv.int32, K: tv.int32, *,
                     bm: int = 64, bn: int = 64, bk: int = 32, num_warps: int = 4):
    """C = A @ B (f16, f32 accumulation), A and B tiles copied to shared memory with
    `copy_async`, two stages deep; zeros outside A and B (ragged M, N, K)."""
    tv.grid(tv.cdiv(M, bm), tv.cdiv(N, bn))
    ga, gb, gc = tv.global_view(a, [M, K]), tv.global_view(b, [K, N]), tv.global_view(c, [M, N])
    m0, n0 = tv.block_idx(0) * bm, tv.block_idx(1) * bn
    sa = [tv.alloc_shared(tv.f16, [bm, bk]) for _ in range(2)]
    sb = [tv.alloc_shared(tv.f16, [bk, bn]) for _ in range(2)]
    tv.copy_async(sa[0], ga, [m0, 0])
    tv.copy_async(sb[0], gb, [0, n0])
    tv.copy_async_commit()
    acc = tv.zeros([bm, bn], tv.f32)
    for k0 in tv.range(0, K, 2 * bk):
        for s in range(2):  # unrolled: stage s holds the k-tile at k0 + s * bk
            k = k0 + s * bk if s else k0
            tv.copy_async(sa[1 - s], ga, [m0, k + bk])  # prefetch (zeros past K)
            tv.copy_async(sb[1 - s], gb, [k + bk, n0])
            tv.copy_async_commit()
            tv.copy_async_wait(1)
            tv.sync()
            ta = tv.load_shared(sa[s], [0, 0], [bm, bk])
            tb = tv.load_shared(sb[s], [0, 0], [bk, bn])
            acc = tv.dot(ta, tb, acc)
            tv.sync()
    tv.copy_async_wait(0)
    tv.store_global(gc, acc.to(tv.f16), [m0, n0])


@tv.kernel(num_warps=4)
def matmul_staged(a: tv.ptr(tv.bf16, const=True), b: tv.ptr(tv.bf16, const=True),
                  c: tv.ptr(tv.f32), M: tv.int32, N: tv.int32, K: tv.int32, *,
                  bm: int = 64, bn: int = 32, bk: int = 32, sub: int = 16,
                  num_warps: int = 4):
    """C = A @ B (bf16 in, f32 out): tiles loaded from global memory, stored to shared
    memory (`store_shared`), then read back `sub` columns of k at a time at a nonzero
    offset (a k-loop over slices of the shared tile, each one `dot`)."""
    tv.grid(tv.cdiv(M, bm), tv.cdiv(N, bn))
    ga, gb, gc = tv.global_view(a, [M, K]), tv.global_view(b, [K, N]), tv.global_view(c, [M, N])
    m0, n0 = tv.block_idx(0) * bm, tv.block_idx(1) * bn
    sa = tv.alloc_shared(tv.bf16, [bm, bk])
    sb = tv.alloc_shared(tv.bf16, [bk, bn])
    acc = tv.zeros([bm, bn], tv.f32)
    for k0 in tv.range(0, K, bk):
        tv.store_shared(sa, tv.load_global(ga, [m0, k0], [bm, bk]))
        tv.store_shared(sb, tv.load_global(gb, [k0, n0], [bk, bn]))
        tv.sync()
        for kk in range(0, bk, sub):  # unrolled
            ta = tv.load_shared(sa, [0, kk], [bm, sub])
            tb = tv.load_shared(sb, [kk, 0], [sub, bn])
            acc = tv.dot(ta, tb, acc)
        tv.sync()
    tv.store_global(gc, acc, [m0, n0])


@tv.kernel(num_warps=4)
def matmul_misaligned(a: tv.ptr(tv.f16, const=True), b: tv.ptr(tv.f16, const=True),
                      c: tv.ptr(tv.f32), M: tv.int32, N: tv.int32, K: tv.int32, *,
                      bm: int = 16, bn: int = 16, bk: int = 16):
    """The A tile read from shared memory 4 columns in: its rows do not start at 16-byte
    boundaries, so no `ldmatrix` for A (B still gets one). C = A[:, 4:] @ B over the
    first 16 columns of a 20-column staging tile (A's columns 4.. are k)."""
    tv.grid(tv.cdiv(M, bm), tv.cdiv(N, bn))
    ga, gb, gc = tv.global_view(a, [M, K]), tv.global_view(b, [K, N]), tv.global_view(c, [M, N])
    m0, n0 = tv.block_idx(0) * bm, tv.block_idx(1) * bn
    sa = tv.alloc_shared(tv.f16, [bm, bk + 8])
    sb = tv.alloc_shared(tv.f16, [bk, bn])
    acc = tv.zeros([bm, bn], tv.f32)
    for k0 in tv.range(0, K, bk):
        tv.store_shared(sa, tv.load_global(ga, [m0, k0 - 4], [bm, bk + 8]))
        tv.store_shared(sb, tv.load_global(gb, [k0, n0], [bk, bn]))
        tv.sync()
        acc = tv.dot(tv.load_shared(sa, [0, 4], [bm, bk]), tv.load_shared(sb, [0, 0], [bk, bn]),
                     acc)
        tv.sync()
    tv.store_global(gc, acc, [m0, n0])


@tv.kernel(num_warps=4)
def store_fragments(x: tv.ptr(tv.f16, const=True), y: tv.ptr(tv.f16), *,
                    b_fragments: bool = False, swizzle: bool = True):
    """y = x (a 64 x 64 f16 tile) through shared memory: loaded in mma A (or, with
    `b_fragments`, B: pairs along the rows) fragment tilings, stored to shared memory
    (`stmatrix` on sm_90: `.trans` for B), read back row-major."""
    frag = spatial(1, 4) * local(4, 2) * mma_m16n8k16_b() if b_fragments else \
        spatial(4, 1) * local(1, 4) * mma_m16n8k16_a()
    gx, gy = tv.global_view(x, [64, 64]), tv.global_view(y, [64, 64])
    s = tv.alloc_shared(tv.f16, [64, 64], layout=swizzled([64, 64], tv.f16) if swizzle
                        else row_major([64, 64], tv.f16))
    tv.store_shared(s, tv.load_global(gx, [0, 0], [64, 64], layout=frag))
    tv.sync()
    tv.store_global(gy, tv.load_shared(s, [0, 0], [64, 64]), [0, 0])
