"""Kernels whose `copy_async`s the tensor memory accelerator may take, for
tests/backend/test_tma.py (kernels must live in files: their source is read)."""

import tilevm as tv


@tv.kernel(num_warps=4)
def staged_copy(x: tv.ptr("f16", const=True), y: tv.ptr("f16"), M: tv.int32, N: tv.int32,
                *, bm: int = 64, bn: int = 64, stages: int = 2, per_block: bool = False,
                copy_first: bool = False, drain: bool = True):
    """y = x for [M, N] f16 (N a multiple of 8: 16-byte rows), a band of `bm` rows per
    block, `bn` columns at a time through `stages` shared buffers (the copy of the next
    tile in flight while one is stored); ragged M and N are zero-filled and masked.
    `per_block`: the source view starts at the block's band (its offset is not fixed
    for the launch, so no tensor map can describe it). `copy_first`: the next tile's copy
    is issued between the wait and the barrier (race-free, but a thread may still be
    waiting when the copy starts: no barrier ring is safe). `drain=False`: the kernel
    ends without waiting for its last copies."""
    tv.assume(N % 8 == 0)
    tv.grid(tv.cdiv(M, bm))
    m0 = tv.block_idx(0) * bm
    if per_block:
        gx = tv.global_view(x, [M - m0, N], strides=[N, 1], offset=m0 * N)
        row = 0
    else:
        gx = tv.global_view(x, [M, N], strides=[N, 1])
        row = m0
    gy = tv.global_view(y, [M, N])
    bufs = [tv.alloc_shared(tv.f16, [bm, bn]) for _ in range(stages)]
    for first in range(stages - 1):
        tv.copy_async(bufs[first], gx, [row, first * bn])
        tv.copy_async_commit()
    for k0 in tv.range(0, N, stages * bn):
        for s in range(stages):
            k = k0 + s * bn if s else k0
            tv.copy_async_wait(stages - 2)
            if not copy_first:
                tv.sync()
            tv.copy_async(bufs[(s + stages - 1) % stages], gx, [row, k + (stages - 1) * bn])
            tv.copy_async_commit()
            if copy_first:
                tv.sync()
            tv.store_global(gy, tv.load_shared(bufs[s], [0, 0], [bm, bn]), [m0, k])
            tv.sync()
    if drain:
        tv.copy_async_wait(0)
