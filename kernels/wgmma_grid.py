"""The Hopper kernels' grid (a compile-time helper of `kernels.qmm_wgmma`,
`qmm_wgmma_shared`, `qmm_streamk`, `qmm_dequant` and `mlp_sync`): which tile of y a
block computes (`block_tile`: the launch grid, the tile order that keeps weight tiles
in L2, `grouped_tiles`; the clusters of a tile's K splits or of column tiles sharing x)
and which rows of K it takes (`block_rows`, `split_range`), with the views of the
operands they share (`operand_views`).
"""

# No `from __future__ import annotations`: as in the kernels, whose helpers these are.
from tilevm.kernels.weight_format import ATOM
from tilevm.vm import lang as tv


def split_range(z, K, chunk: int, split_k: int):
    """Rows [begin, end) of K that split `z` of `split_k` takes: whole iterations of the
    main loop (`chunk` rows), the C = ceil(K / chunk) of them shared out so that splits
    differ by at most one (`end` may pass K). A compile-time helper."""
    iterations = tv.cdiv(K, chunk)
    return z * iterations // split_k * chunk, (z + 1) * iterations // split_k * chunk


def block_tile(x, w, scales, zeros, M, N, K, bits: int, bm: int, bn: int,
               group_size: int, group_m: int, lane_run: tuple[int, ...] | None = None,
               split_k: int = 1, wait_previous: bool = True, split_cluster: bool = False,
               cluster_n: int = 1):
    """The launch grid and this block's tile, as the prefill kernels share them (a
    compile-time helper): (column tile, its first column n0, first row m0, and the views
    x^T [K, M] (K contiguous), codes [K / 32, Np / 32, 32, *lane_run] (Np: N padded to
    the format's 32; `lane_run` the shape of a lane's 4 * bits bytes, by default flat),
    scales and zeros [Np, K / group_size]). Without `wait_previous` the block does not
    wait for the previous kernel (a consumer that waits for its producer's tiles
    instead, docs/tile-sync.md). With `split_cluster` the `split_k` splits of a tile are
    consecutive blocks along x, one cluster (`split_slot`); with `cluster_n` that many
    adjacent column tiles of a row tile are (`x_sharing_tiles`)."""
    tv.assume(K % group_size == 0)
    tv.assume(K % ATOM == 0)
    tiles_n, tiles_m = tv.cdiv(N, bn), tv.cdiv(M, bm)
    if cluster_n > 1:
        n_tile, m_tile = x_sharing_tiles(tiles_n, tiles_m, group_m, cluster_n)
    elif split_cluster:
        tv.cluster(split_k)
        tv.grid(tiles_n * split_k, tiles_m)
    else:
        tv.grid(tiles_n, tiles_m, *((split_k,) if split_k > 1 else ()))
    # Programmatic dependent launch (sm_90): the next kernel may start now; this one
    # waits for the previous one here, before touching memory.
    tv.launch_dependents()
    if wait_previous:
        tv.wait_prerequisites()
    if cluster_n == 1:
        n_tile, m_tile = grouped_tiles(tiles_n, tiles_m, group_m,
                                       split_k if split_cluster else 1)
    n0, m0 = n_tile * bn, m_tile * bm
    return (n_tile, n0, m0,
            *operand_views(x, w, scales, zeros, M, N, K, bits, group_size, lane_run))


def operand_views(x, w, scales, zeros, M, N, K, bits: int, group_size: int,
                  lane_run: tuple[int, ...] | None = None) -> tuple:
    """The prefill kernels' views of their operands (a compile-time helper): x^T [K, M]
    (K contiguous), codes [K / 32, Np / 32, 32, *lane_run] (Np: N padded to the format's
    32; `lane_run` the shape of a lane's 4 * bits bytes, by default flat), scales and
    zeros [Np, K / group_size]."""
    Np = tv.cdiv(N, ATOM) * ATOM  # the format's padded width
    gxt = tv.global_view(x, [K, M], strides=[1, K])
    gw = tv.global_view(w, [K // ATOM, Np // ATOM, 32, *(lane_run or (4 * bits,))])
    gs = tv.global_view(scales, [Np, K // group_size], strides=[1, Np])
    gz = tv.global_view(zeros, [Np, K // group_size], strides=[1, Np])
    return gxt, gw, gs, gz


def grouped_tiles(tiles_n, tiles_m, group_m: int, blocks_a_tile: int = 1):
    """(column tile, row tile) of this block: the blocks, in launch order, take the
    tiles of `group_m` row tiles a column tile at a time (row tile fastest), then the
    next `group_m` rows (a compile-time helper of the kernel); `blocks_a_tile`
    consecutive blocks along x take the same tile (a cluster's splits).

    Why: the blocks that run at once then share their weight tiles through L2, and a
    group's x rows stay there while its columns go by; DRAM reads each weight tile
    once per group instead of once per wave. In launch order (column tile fastest) a
    wave of blocks spans all columns of two or three row tiles, the whole weight
    matrix, which does not stay in L2: DRAM then reads the weights many times over,
    and most stalls wait on global loads. Groups of 8 row tiles (the kernels' default
    `group_m`) did best of the group sizes tried."""
    column = tv.block_idx(0) // blocks_a_tile if blocks_a_tile > 1 else tv.block_idx(0)
    return tile_of(tv.block_idx(1) * tiles_n + column, tiles_n, tiles_m, group_m)


def block_rows(K, chunk: int, split_k: int, split_cluster: bool = False):
    """(first row, rows) of K this block takes: all of K, or with `split_k` its split's
    `split_range` (a compile-time helper)."""
    if split_k == 1:
        return 0, K
    begin, end = split_range(split_slot(split_k, split_cluster), K, chunk, split_k)
    return begin, end - begin


def split_slot(split_k: int, split_cluster: bool):
    """Which of its tile's `split_k` splits this block is (`block_tile`'s grid; a
    compile-time helper)."""
    return tv.block_idx(0) % split_k if split_cluster else tv.block_idx(2)


def tile_of(tile, tiles_n, tiles_m, group_m: int):
    """(column tile, row tile) of the `tile`-th tile in `grouped_tiles`' order (a
    compile-time helper; a persistent kernel's blocks walk several)."""
    per_group = group_m * tiles_n
    first = tile // per_group * group_m
    rows = tv.min(tiles_m - first, group_m)
    return tile % per_group // rows, first + tile % per_group % rows


def x_sharing_tiles(tiles_n, tiles_m, group_m: int, cluster: int):
    """Launch clusters of `cluster` adjacent column tiles of one row tile, which share
    x's tiles (`tv.copy_async(..., multicast=True)`), and return this block's (column
    tile, row tile): the clusters take `grouped_tiles`' order, the last one's columns
    may reach past N (a compile-time helper)."""
    tv.cluster(cluster)
    groups_n = tv.cdiv(tiles_n, cluster)
    tv.grid(groups_n * cluster, tiles_m)
    n_group, m_tile = tile_of(tv.block_idx(1) * groups_n + tv.block_idx(0) // cluster,
                              groups_n, tiles_m, group_m)
    return n_group * cluster + tv.block_idx(0) % cluster, m_tile
