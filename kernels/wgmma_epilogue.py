"""How the Hopper kernels store their tile of y (a compile-time helper of
`kernels.qmm_wgmma`, `qmm_wgmma_shared`, `qmm_streamk`, `qmm_dequant` and `mlp_sync`):
from the accumulators, transposed, through shared memory in 16-byte pieces of a row
(`store_transposed`); with a K split, the partial sums parked and the tile's last block
adding them (`store_output`); the main loop's buffers freed for the tile (`release`).
"""

# No `from __future__ import annotations`: as in the kernels, whose helpers these are.
from tilevm.dtypes import DataType
from tilevm.kernels.qmm import park_partial_sums, parts_total, reset_count
from tilevm.kernels.wgmma_grid import split_slot
from tilevm.layouts import local
from tilevm.layouts.shared_layout import SharedLayout
from tilevm.vm import lang as tv


@tv.inline
def store_output(y, ws, counters, acc, acc_layout, act: DataType, M, N, bm: int, bn: int,
                 n_tile, n0, m0, split_k: int, num_warps: int, buffers, wide_stores: bool,
                 split_cluster: bool = False):
    """The block's tile of y from its accumulators `acc` (`wgmma_mainloop`'s): stored
    transposed; with `split_k`, its partial sums parked in the workspace `ws` and the
    tile's last block to arrive (`counters`) adds the splits in order and stores, as in
    `kernels.qmm` (`park_partial_sums`). With `split_cluster` the tile's splits are one
    cluster instead: each but the first leaves its sums in its shared memory, and after
    the cluster barrier the first adds them to its own, in split order, and stores."""
    if split_cluster:
        part = tv.alloc_shared(tv.f32, [bn, bm])
        split = split_slot(split_k, split_cluster)
        if split != 0:
            tv.store_shared(part, acc)
        tv.cluster_sync()
        if split == 0:
            total = acc
            for peer in range(1, split_k):
                total = total + tv.load_shared(part, [0, 0], [bn, bm], layout=acc_layout,
                                               peer=peer)
            store_transposed(y, total, acc_layout, act, M, N, n0, m0, num_warps,
                             buffers, wide_stores)
    elif split_k > 1:
        tiles_n = tv.cdiv(N, bn)
        tiles = tiles_n * tv.cdiv(M, bm)
        tile = m0 // bm * tiles_n + n_tile
        parts, arrived = park_partial_sums(ws, counters, acc, split_k, tiles, tile,
                                           split_slot(split_k, split_cluster))
        if wide_stores:  # released here, where every thread passes: the last block's
            release(buffers)  # tile of y may then take their bytes (a barrier in the
            # branch below frees none for the shared-memory plan: it may not be taken)
        if arrived == split_k - 1:
            total = parts_total(parts, split_k, tile, acc)
            store_transposed(y, total, acc_layout, act, M, N, n0, m0, num_warps, (),
                             wide_stores)
            reset_count(counters, tiles, tile)
    else:
        store_transposed(y, acc, acc_layout, act, M, N, n0, m0, num_warps, buffers,
                         wide_stores)


def release(buffers) -> None:
    """Free the main loop's shared `buffers` behind a barrier every warp passes, so that
    a tile allocated next may take their bytes (a compile-time helper)."""
    for buf in buffers:
        tv.free_shared(buf)
    tv.sync()  # every warp is done with them


def store_transposed(y, acc, acc_layout, act, M, N, n0, m0, num_warps: int,
                     buffers=(), wide: bool = True) -> None:
    """Store the block's tile of y^T, `acc` `[bn, bm]` in f32 (`acc_layout`: mma C
    fragments), into y `[M, N]` at rows `m0`, columns `n0`, masked to M x N (a
    compile-time helper of the Hopper kernels).

    A thread's fragments hold two values of a row of y 16 bytes apart, so stored as
    they are (`wide=False`) each is a 2-byte store and a warp's store touches eight
    rows. With `wide` the tile goes through shared memory instead: the `buffers` (the
    main loop's stages, which the whole tile then reuses) are freed, each thread writes
    its values, and after a barrier reads back and stores 16 contiguous bytes of a row
    of y: for a 256 x 128 tile, 16 global stores a thread instead of 128, for 128
    2-byte shared stores and 32 8-byte shared loads, which is faster. `wide` needs
    N % 8 == 0 (the 16-byte pieces of a row are then aligned; checked before launch).

    The shared tile's rows are padded by 8 bytes, unswizzled (2-byte shared stores): the
    planner's swizzled layout (`stmatrix` stores) was no faster."""
    bn, bm = acc_layout.shape
    threads = 32 * num_warps
    per_row = bn // 8  # threads along a row of the tile: 16 bytes each
    if not wide or bm * bn % (8 * threads) or threads % per_row:  # (tiles too small)
        tv.store_global(tv.global_view(y, [N, M], strides=[1, N]), tv.cast(acc, act),
                        [n0, m0])
        return
    tv.assume(N % 8 == 0)
    tile = tv.view(tv.cast(acc, act), act, [bm, bn], acc_layout.permute((1, 0)))
    release(buffers)  # (the tile takes their bytes)
    padded = SharedLayout((bm, bn), (bn + 4, 1), act.bits)  # 8 bytes a row
    out = tv.alloc_shared(act, [bm, bn], layout=padded)
    tv.store_shared(out, tile)
    tv.sync()
    rows = local(bm * bn // (8 * threads), 1).spatial(threads // per_row, per_row) \
        .local(1, 8)
    tv.store_global(tv.global_view(y, [M, N]),
                    tv.load_shared(out, [0, 0], [bm, bn], layout=rows), [m0, n0])
