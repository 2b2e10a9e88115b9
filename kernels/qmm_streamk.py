"""The register-A wgmma kernel over an even share of the work per block (stream-K), for
the rows between decode and prefill on Hopper (sm_90a).

Same problem, weight format, tilings and conversion as `kernels.qmm_wgmma` (its
`wgmma_layouts`, `load_codes`, `codes_as`, `scaled`); what differs is who does which
k-tiles. With a grid of one block per output tile, a layer with few tiles leaves SMs
idle (8B qkv at M = 64: 96 tiles of 64 x 128 for 132 SMs) and a K split in whole
fractions balances no better. Here the work is the list of every tile's main-loop
iterations (`units` of `stages * bk` rows of K each, tile after tile in `tile_of`'s
grouped order), and block `b` of `P` takes the units `[b W / P, (b + 1) W / P)` of the
`W` there are: every block the same work to within one unit, whatever the tile count.

- A block walks its units in one pipeline: the x copies `lead` k-tiles ahead and the
  codes `prefetch` k-tiles ahead run on into its next tile's first units, so a tile
  boundary costs no refill.
- A block's units of one tile are a segment. A tile whose units are all one block's is
  stored by it. Otherwise each of the tile's blocks (consecutive: `owner`) parks its
  partial sums in the workspace as part `b - owner(first unit)` and counts itself in;
  the last to arrive adds the parts in order (the same sum whichever arrives last),
  stores y and sets the count back to zero for the next launch.
- y is stored from the fragments (`store_transposed` without `wide`): the stages'
  buffers are still in flight for the next tile, so the wide store's reuse of them is
  not available.

The launch (`kernels.matmul`) takes `P` at most `W`, and the workspace of `slots` parts
a tile (`streamk_slots`)."""

# No `from __future__ import annotations` here: the kernels' parameter annotations
# (`tv.ptr(act)`) must be evaluated where they are written, inside the factory.
from functools import cache

from tilevm.dtypes import DataType
from tilevm.kernels.qmm import (
    activation_type,
    fetch_ahead,
    park_partial_sums,
    parts_total,
    reset_count,
    shift_ahead,
)
from tilevm.kernels.qmm_wgmma import (
    check_tiling,
    codes_as,
    copy_ktile,
    load_codes,
    scaled,
    wgmma_layouts,
)
from tilevm.kernels.weight_format import ATOM
from tilevm.kernels.wgmma_epilogue import store_transposed
from tilevm.kernels.wgmma_grid import operand_views, tile_of
from tilevm.vm import lang as tv
from tilevm.vm.frontend import Kernel


def streamk_units(M: int, N: int, K: int, bm: int, bn: int, chunk: int) -> tuple[int, int]:
    """(tiles, units a tile): the work the stream-K kernel shares out is their product."""
    return -(-M // bm) * -(-N // bn), -(-K // chunk)


def streamk_slots(tiles: int, units: int, blocks: int) -> int:
    """The most blocks whose shares meet one tile when `blocks` blocks share
    `tiles * units` units evenly: the workspace's parts a tile."""
    work = tiles * units
    if work < blocks:
        raise ValueError(f"{blocks} blocks for {work} units of work: at most one block a "
                         "unit")
    meeting = [0] * tiles
    for b in range(blocks):
        first, end = b * work // blocks, (b + 1) * work // blocks
        for t in range(first // units, (end - 1) // units + 1):
            meeting[t] += 1
    return max(meeting)


def owner(u, work, blocks):
    """The block whose share holds unit `u` (a compile-time helper): the largest b with
    floor(b W / P) <= u."""
    return ((u + 1) * blocks - 1) // work


@cache
def qmm_streamk_kernel(act: DataType | str = "f16") -> Kernel:
    """The stream-K kernel for activations (and scales, zeros, output) of type `act`."""
    act = activation_type(act)

    @tv.kernel(num_warps=4)
    def qmm_streamk(x: tv.ptr(act, const=True), w: tv.ptr(tv.uint8, const=True),
                    scales: tv.ptr(act, const=True), zeros: tv.ptr(act, const=True),
                    y: tv.ptr(act), ws: tv.ptr(tv.f32), counters: tv.ptr(tv.int32),
                    M: tv.int32, N: tv.int32, K: tv.int32, P: tv.int32, slots: tv.int32,
                    *, wdtype: DataType = tv.int4, group_size: int = 128,
                    has_zeros: bool = False, bm: int = 64, bk: int = 64, num_warps: int = 4,
                    stages: int = 4, group_m: int = 8, lead: int = 2, prefetch: int = 2,
                    half_atoms: bool = False):
        b = wdtype.bits
        check_tiling(wdtype, group_size, bm, bk, num_warps, stages, group_m, lead,
                     prefetch, half_atoms)
        tv.static_assert(prefetch <= stages, f"prefetch={prefetch} must be at most "
                         f"stages={stages}: the codes run at most one unit ahead")
        chunk = stages * bk  # rows of K a unit (one iteration of the main loop)
        lay = wgmma_layouts(act, b, bm, bk, num_warps, half_atoms)
        bn = lay.bn
        tv.assume(K % group_size == 0)
        tv.assume(K % ATOM == 0)
        tv.grid(P)
        tv.launch_dependents()
        tv.wait_prerequisites()
        gxt, gw, gs, gz = operand_views(x, w, scales, zeros, M, N, K, b, group_size,
                                        lay.lane_run)

        tiles_n, tiles_m = tv.cdiv(N, bn), tv.cdiv(M, bm)
        tiles = tiles_n * tiles_m
        units = tv.cdiv(K, chunk)
        work = tiles * units
        me = tv.block_idx(0)
        u_begin = me * work // P
        u_end = (me + 1) * work // P
        t_first = u_begin // units
        t_last = (u_end - 1) // units

        xs = [tv.alloc_shared(act, [bk, bm], layout=lay.xt) for _ in range(stages)]
        ss = [tv.alloc_shared(act, [bn, 1]) for _ in range(stages)]
        zs = [tv.alloc_shared(act, [bn, 1]) for _ in range(stages)] if has_zeros else None

        # The first unit's first k-tiles: x `lead` ahead, the codes `prefetch` ahead.
        n_tile, m_tile = tile_of(t_first, tiles_n, tiles_m, group_m)
        rows0 = (u_begin - t_first * units) * chunk
        for first in range(lead):
            copy_ktile(xs, ss, zs, first, gxt, gs, gz, rows0 + first * bk, m_tile * bm,
                       n_tile * bn, group_size)
            tv.copy_async_commit()
        w1, w2, w3, w4 = fetch_ahead(
            lambda k: load_codes(gw, lay, rows0 + k, n_tile * lay.atoms), bk, prefetch)
        # Bound here so that the loop carries them: scalar variables set once a tile, not
        # expressions (with divisions) computed again at every use in the inner loop.
        n_next, m_next = n_tile, m_tile

        for t in tv.range(t_first, t_last + 1):
            n_tile, m_tile = tile_of(t, tiles_n, tiles_m, group_m)
            n0, m0 = n_tile * bn, m_tile * bm
            # Where the look-ahead goes after this segment: the next tile's first unit,
            # or, after the block's last unit, that unit again (copies never read).
            later = t < t_last
            t_next = tv.where(later, t + 1, t)
            n_next, m_next = tile_of(t_next, tiles_n, tiles_m, group_m)
            seg_begin = tv.max(u_begin, t * units)
            seg_end = tv.min(u_end, (t + 1) * units)
            rows_next = tv.where(later, 0, (seg_end - 1 - t * units) * chunk)
            acc = tv.zeros([bn, bm], tv.f32, layout=lay.acc)
            for u in tv.range(seg_begin, seg_end):
                rows = (u - t * units) * chunk
                inside = u + 1 < seg_end  # the next unit is this tile's
                ahead_n = tv.where(inside, n_tile, n_next)
                ahead_m = tv.where(inside, m_tile, m_next)
                ahead_rows = tv.where(inside, rows + chunk, rows_next)
                for s in range(stages):  # unrolled: buffer s holds k-tile s of unit u
                    fetch = s + prefetch
                    codes = load_codes(gw, lay, rows + fetch * bk, n_tile * lay.atoms) \
                        if fetch < stages else \
                        load_codes(gw, lay, ahead_rows + (fetch - stages) * bk,
                                   ahead_n * lay.atoms)
                    packed, w1, w2, w3, w4 = shift_ahead((w1, w2, w3, w4), codes)
                    wt = codes_as(packed, wdtype, act, lay)
                    tv.copy_async_wait(lead - 1)  # this k-tile of x has landed, for
                    tv.sync()  # every thread; the buffer refilled next is read by none
                    wt = scaled(wt, ss[s], zs[s] if has_zeros else None, lay)
                    copy = s + lead
                    if copy < stages:
                        copy_ktile(xs, ss, zs, copy, gxt, gs, gz, rows + copy * bk, m0, n0,
                                   group_size)
                    else:
                        copy_ktile(xs, ss, zs, copy - stages, gxt, gs, gz,
                                   ahead_rows + (copy - stages) * bk, ahead_m * bm,
                                   ahead_n * bn, group_size)
                    tv.copy_async_commit()
                    acc = tv.dot(wt, xs[s], acc)
            # The tile's blocks: one stores it; several park their parts, the last adds.
            first_owner = owner(t * units, work, P)
            parts_n = owner((t + 1) * units - 1, work, P) - first_owner + 1
            if parts_n == 1:
                store_transposed(y, acc, lay.acc, act, M, N, n0, m0, num_warps, wide=False)
            else:
                parts, arrived = park_partial_sums(ws, counters, acc, slots, tiles, t,
                                                   me - first_owner)
                if arrived == parts_n - 1:
                    total = parts_total(parts, parts_n, t, acc)
                    store_transposed(y, total, lay.acc, act, M, N, n0, m0, num_warps,
                                     wide=False)
                    reset_count(counters, tiles, t)
        tv.copy_async_wait(0)

    qmm_streamk.name = f"qmm_streamk_{act.name}"
    return qmm_streamk


qmm_streamk_f16 = qmm_streamk_kernel("f16")  # for `vmc compile kernels/qmm_streamk.py:...`
