"""The quantized matmul for many rows on Hopper (sm_90a): `y^T = dequant(W)^T @ x^T` with
warpgroup MMA, the dequantized weights as the A operand in registers and the
activations as the B operand read by the tensor cores from shared memory.

Same problem, weight format and requirements as `kernels.qmm`; the kernel for prefill
where `wgmma` exists (`kernels.qmm_staged` is the one for sm_80/sm_89). Why this shape:
on `mma.sync` every warp converts the weights it multiplies, and a 64 x 32 warp tile
converts each weight for only 64 rows of x; `wgmma` multiplies a 64-column slice of W^T
by up to 256 rows of x in one instruction, from shared memory, so each weight is
converted once per `bm` rows (128 here) and the tensor cores read x without a register
round trip (no ldmatrix, no conversion of x).

- A block has `num_warps` warps (whole warpgroups) and computes `bn = 32 * num_warps`
  columns of y for `bm` rows; warp `j` owns atom `j` of the format (32 columns) and
  streams its codes from global memory into registers, `prefetch` k-tiles ahead (the
  format's per-lane order: 16 bytes per lane for int4 and 32 rows of K; with `stages`
  a multiple of `prefetch + 1` the registers come round to the loop's start without
  copies);
- the codes are cast to f16/bf16 in `mma` A-fragment order (`a_layout`: warp `j`'s two
  16-column halves of its atom), minus the zero point, times the group's scale (rounded
  once to the activation type, as the weights of an f16 layer are; the scales and zeros
  of each k-tile are copied to shared memory with its x tile): the A operand.
  Within a warpgroup, half `h` of the 4 warps' atoms is one 64-row `wgmma`;
- with `half_atoms` (codes of an even width) warp `j` takes 16 columns instead, half an
  atom (one A fragment's rows): `bn = 16 * num_warps`, a warpgroup's 64 columns are one
  `wgmma`, and its accumulators are `bm / 2` a thread, so 8 warps multiply 128 columns
  by 256 rows of x, converting each weight once per 256 rows as
  `kernels.qmm_wgmma_shared` does, but with the weights straight from the conversion's
  registers into the tensor cores: no shared tile of weights, no `stmatrix`, no
  barrier waiting for every warp's conversion before a warpgroup's wgmmas. Each warp
  loads the 2b bytes of a lane's 4b that hold its half (`half_atom_code_layout`: the
  format stores half atom 0's codes first). It beats the shared-weights kernel where
  the conversion is dear (6- and 8-bit codes; `schedule.HALF_ATOM_BITS`). For odd
  widths a half atom's codes are not whole bytes of a lane's run: they keep whole atoms;
- the activations are copied by `copy_async` as x^T k-tiles `[bk, bm]`, K-major (each
  row of x is a column of 128 contiguous bytes, the 128-byte swizzle of wgmma), into
  `stages` shared buffers, `lead` k-tiles ahead (1..stages-1; 0: stages - 1), one
  barrier per k-tile; rows past M and K are zero-filled;
- `dot(wt, xs, acc)` accumulates y^T in f32 registers (`acc_layout`: `bm` floats per
  thread), stored transposed and masked at the end. Its wgmmas run while the warps
  convert the next k-tile only if the copy after the next barrier does not refill their
  buffer: with `lead = stages - 1` it does (k-tile t's buffer is refilled at t + 1), so
  each barrier waits for the tensor cores; with `lead <= stages - 2` the barrier keeps
  k-tile t's group in flight (`wgmma_waits`; each `dot` retires the group before its
  own), which keeps the tensor pipe busier. ptxas keeps the two k-tiles' A registers
  apart only with an even number of stages (the loop is unrolled `stages` times; with an
  odd number it serializes every wgmma, C7513);
- blocks take their tiles in groups of `group_m` row tiles (`grouped_tiles`), so that
  the blocks running at once share weight tiles in L2;
- with `pair_k` (two warpgroups of half atoms) a block computes 64 columns and its
  warpgroups take the two k-tiles of each pair (2t, 2t + 1) of them: warps 4-7 load and
  convert the second k-tile's codes of the same atoms (`paired_views`), each stage's x
  buffer holds both k-tiles ([2, bk, bm]) and one dot multiplies each warpgroup's rows
  by its own (a dot with b's two matrices); the two sums are added at the end. Twice
  the warps a scheduler at the same grid, where a K split would add its reduction
  through global memory to the last block's critical path. A pair lies in one group
  of scales (its rows share them).

`bk` is 64 (128-byte rows of f16) or 32 (64-byte rows, the 64-byte swizzle), dividing
the group size: a k-tile never straddles two scale groups.
"""

# No `from __future__ import annotations` here: the kernels' parameter annotations
# (`tv.ptr(act)`) must be evaluated where they are written, inside the factory.
import math
from functools import cache
from typing import NamedTuple

from tilevm.dtypes import DataType
from tilevm.ir.stmt import WARPGROUP_WARPS
from tilevm.kernels.qmm import (
    activation_type,
    fetch_ahead,
    park_partial_sums,
    parts_total,
    reset_count,
    shift_ahead,
)
from tilevm.kernels.weight_format import ATOM, atom_code_layout, half_atom_code_layout
from tilevm.layouts import RegisterLayout, local, spatial
from tilevm.layouts.fragments import mma_m16n8k16_a, mma_m16n8k16_c
from tilevm.layouts.shared_layout import SharedLayout, swizzled
from tilevm.vm import lang as tv
from tilevm.vm.frontend import Kernel

# The most k-tiles of codes the register-A main loop keeps in flight (`prefetch`): one
# loop-carried name a slot. Deeper than the other kernels' 4: with one warpgroup of half
# atoms a k-tile's codes are 4 registers a thread, and a block that has one warp a
# scheduler keeps few weight bytes in flight between decode and prefill.
REGISTER_A_AHEAD = 8


@tv.inline
def wgmma_mainloop(x, w, scales, zeros, M, N, K, act: DataType, wdtype: DataType,
                   group_size: int, has_zeros: bool, bm: int, bk: int, num_warps: int,
                   stages: int, group_m: int, lead: int, prefetch: int, half_atoms: bool,
                   split_k: int, wait_previous: bool = True, before_loads=None,
                   before_copy=None, split_cluster: bool = False, pair_k: bool = False,
                   cluster_n: int = 1):
    """The Hopper kernel's launch grid, block tile and main loop (module docstring), as
    the kernels that use it share it: returns the accumulators `acc` ([bn, bm] of y^T
    in f32), their layout, `bn`, the block's column tile and first column and row, and
    the shared buffers the epilogue may reuse. `wait_previous`: as `block_tile`'s;
    `before_loads(m0)`, if given, runs before the block's first load of x (a wait for
    the producer's rows of x); `before_copy(k, m0)` before the copy of each k-tile `k`
    of x (k may run past K: those copies read zeros; a wait for the producer's tile of
    those columns). With `pair_k` (two warpgroups of half atoms) the block's warpgroups
    take the two k-tiles of each pair (2t, 2t + 1) of one 64-column tile (`paired_views`;
    a dot with b's two matrices), and `acc` is their sum (module docstring). With
    `cluster_n` (2 or 4) that many adjacent column tiles are one cluster whose x tiles a
    producer warp copies once for all of them (TMA multicast)."""
    b = wdtype.bits
    lead = lead or stages - 1
    check_tiling(wdtype, group_size, bm, bk, num_warps, stages, group_m, lead, prefetch,
                 half_atoms, REGISTER_A_AHEAD)
    tv.static_assert(not pair_k or (half_atoms and num_warps == 8 and bm % 16 == 0
                                    and group_size % (2 * bk) == 0),
                     f"pair_k takes two warpgroups of half atoms (num_warps=8), rows of x "
                     f"in 16s (bm={bm}: each warpgroup ends with half of them) and pairs of "
                     f"k-tiles within a group ({2 * bk} rows dividing {group_size})")
    tv.static_assert(cluster_n in (1, 2, 4) and (cluster_n == 1 or (
        split_k == 1 and not pair_k and before_copy is None and before_loads is None)),
                     f"cluster_n={cluster_n} must be 1, 2 or 4, and more than 1 only "
                     f"without split_k, pair_k or waits before the copies")
    if cluster_n > 1:  # (it issues the copies: x's multicast to the cluster)
        tv.producer_warp()
    step = 2 * bk if pair_k else bk  # rows of K a stage of the main loop takes
    chunk = stages * step  # rows of K per iteration of the main loop
    tv.static_assert(split_k == 1 or chunk % group_size == 0,
                     f"split_k={split_k} splits K into whole iterations of {chunk} rows "
                     f"(stages * {step}), which must be whole groups of {group_size}")
    lay = wgmma_layouts(act, b, bm, bk, num_warps, half_atoms)
    bn = lay.bn // 2 if pair_k else lay.bn  # columns of y the block computes
    n_tile, n0, m0, gxt, gw, gs, gz = block_tile(x, w, scales, zeros, M, N, K, b, bm, bn,
                                                 group_size, group_m, lay.lane_run, split_k,
                                                 wait_previous, split_cluster, cluster_n)
    if before_loads is not None:
        before_loads(m0)
    atom_n0 = n_tile * (bn // ATOM)
    if pair_k:
        gw, gxt = paired_views(w, x, M, N, K, bk, lay)
    # The views stay whole (the copies' tensor maps are the launch's): the block's
    # k-tiles are offset by `k_begin`.
    k_begin, k_len = block_rows(K, chunk, split_k, split_cluster)

    codes_at = lambda k: load_codes(gw, lay, k_begin + k, atom_n0)  # noqa: E731  (k: of this split's rows)
    xs = [tv.alloc_shared(act, [2, bk, bm], layout=swizzled([2, bm, bk], act).permute(
        (0, 2, 1))) if pair_k else tv.alloc_shared(act, [bk, bm], layout=lay.xt)
        for _ in range(stages)]
    # Each x buffer comes with its k-tile's scales (and zeros): copied with it, read
    # from shared memory where the weights are scaled (no global latency there).
    ss = [tv.alloc_shared(act, [bn, 1]) for _ in range(stages)]
    zs = [tv.alloc_shared(act, [bn, 1]) for _ in range(stages)] if has_zeros else None
    for first in range(lead):  # (not `s`: a runtime loop would carry it)
        start_ktile(xs, ss, zs, first, gxt, gs, gz, first * step, k_begin, k_len, m0, n0,
                    group_size, split_k, before_copy, cluster_n > 1)
        tv.copy_async_commit()
    # (names carried by the loop: `REGISTER_A_AHEAD` slots)
    w1, w2, w3, w4, w5, w6, w7, w8 = fetch_ahead(codes_at, step, prefetch, REGISTER_A_AHEAD)
    acc = tv.zeros([lay.bn, bm], tv.f32, layout=lay.acc)
    for k0 in tv.range(0, k_len, chunk):
        for s in range(stages):  # unrolled: buffer s holds k-tile k0 + s * step
            k = k0 + s * step if s else k0
            packed, w1, w2, w3, w4, w5, w6, w7, w8 = shift_ahead(
                (w1, w2, w3, w4, w5, w6, w7, w8), codes_at(k + prefetch * step))
            wt = codes_as(packed, wdtype, act, lay)
            tv.copy_async_wait(lead - 1)  # this k-tile of x has landed (this
            tv.sync()  # thread's copies) for every thread; the buffer refilled next
            # (k-tile t + lead - stages) is one no warp or wgmma in flight reads
            wt = scaled(wt, ss[s], zs[s] if has_zeros else None, lay, pair_k)
            start_ktile(xs, ss, zs, (s + lead) % stages, gxt, gs, gz, k + lead * step,
                        k_begin, k_len, m0, n0, group_size, split_k, before_copy,
                        cluster_n > 1)
            tv.copy_async_commit()
            acc = tv.dot(wt, xs[s], acc)
    tv.copy_async_wait(0)
    buffers = (*xs, *ss, *(zs or ()))
    if pair_k:
        acc, layout = add_pair_sums(acc, lay.acc, bn, bm, buffers)
        return acc, layout, bn, n_tile, n0, m0, ()
    return acc, lay.acc, bn, n_tile, n0, m0, buffers


def add_pair_sums(acc, acc_layout: RegisterLayout, bn: int, bm: int, buffers):
    """`pair_k`'s tile: the two warpgroups' sums (`acc`, [2 bn, bm]) added, through
    shared memory in the main loop's `buffers` (freed: the epilogue has none left), each
    warpgroup then holding half of the tile's rows of x (mma C fragments, 4 warps along
    the 64 columns of y, 2 along x's rows) (a compile-time helper). Returns it and its
    layout."""
    pairs = acc_layout.reshape(2, bn, bm)
    layout = spatial(WARPGROUP_WARPS, 2) * local(bn // (16 * WARPGROUP_WARPS), bm // 16) \
        * mma_m16n8k16_c()
    halves = layout.unsqueeze(0)
    release(buffers)  # (the sums take their bytes)
    sums = tv.alloc_shared(tv.f32, [2, bn, bm])
    tv.store_shared(sums, tv.view(acc, tv.f32, [2, bn, bm], pairs))
    tv.sync()
    total = tv.load_shared(sums, [0, 0, 0], [1, bn, bm], layout=halves) + \
        tv.load_shared(sums, [1, 0, 0], [1, bn, bm], layout=halves)
    tv.free_shared(sums)
    return tv.view(total, tv.f32, [bn, bm], layout), layout


@cache
def qmm_wgmma_kernel(act: DataType | str = "f16") -> Kernel:
    """The Hopper kernel for activations (and scales, zeros, output) of type `act`."""
    act = activation_type(act)

    @tv.kernel(num_warps=4)
    def qmm_wgmma(x: tv.ptr(act, const=True), w: tv.ptr(tv.uint8, const=True),
                  scales: tv.ptr(act, const=True), zeros: tv.ptr(act, const=True),
                  y: tv.ptr(act), ws: tv.ptr(tv.f32), counters: tv.ptr(tv.int32),
                  M: tv.int32, N: tv.int32, K: tv.int32,
                  *, wdtype: DataType = tv.int4, group_size: int = 128,
                  has_zeros: bool = False, bm: int = 128, bk: int = 64, num_warps: int = 4,
                  stages: int = 3, group_m: int = 8, lead: int = 0, prefetch: int = 1,
                  wide_stores: bool = False, half_atoms: bool = False, split_k: int = 1,
                  split_cluster: bool = False, pair_k: bool = False, cluster_n: int = 1):
        tv.static_assert(not split_cluster or split_k in (2, 4, 8),
                         f"split_cluster makes a tile's splits one cluster: split_k 2, 4 "
                         f"or 8, got {split_k}")
        acc, acc_layout, bn, n_tile, n0, m0, buffers = wgmma_mainloop(
            x, w, scales, zeros, M, N, K, act, wdtype, group_size, has_zeros, bm, bk,
            num_warps, stages, group_m, lead, prefetch, half_atoms, split_k,
            split_cluster=split_cluster, pair_k=pair_k, cluster_n=cluster_n)
        store_output(y, ws, counters, acc, acc_layout, act, M, N, bm, bn, n_tile, n0, m0,
                     split_k, num_warps, buffers, wide_stores, split_cluster)

    qmm_wgmma.name = f"qmm_wgmma_{act.name}"
    return qmm_wgmma


def check_tiling(wdtype: DataType, group_size: int, bm: int, bk: int, num_warps: int,
                 stages: int, group_m: int, lead: int, prefetch: int,
                 half_atoms: bool, most_ahead: int = 4) -> None:
    """The register-A kernels' requirements on their constants (a compile-time helper;
    `lead` as resolved, 1..stages-1; `prefetch` up to the kernel's `most_ahead`)."""
    b = wdtype.bits
    tv.static_assert(1 <= b <= 8, f"wdtype must have 1..8 bits, got {wdtype}")
    tv.static_assert(bk in (32, 64) and group_size % bk == 0,
                     f"bk={bk} must be 32 or 64 (64- or 128-byte rows of x) dividing "
                     f"group_size={group_size}")
    tv.static_assert(num_warps % 4 == 0,
                     f"num_warps={num_warps} must be whole warpgroups (4 warps)")
    tv.static_assert(bm % 8 == 0 and 8 <= bm <= 256,
                     f"bm={bm} must be a multiple of 8 up to 256 (wgmma's N)")
    tv.static_assert(2 <= stages <= 6, f"stages must be 2..6, got {stages}")
    tv.static_assert(group_m >= 1, f"group_m is a number of row tiles, got {group_m}")
    tv.static_assert(1 <= lead <= stages - 1, f"lead={lead} must be 1..stages-1")
    tv.static_assert(1 <= prefetch <= most_ahead,
                     f"prefetch is 1 to {most_ahead} k-tiles, got {prefetch}")
    tv.static_assert(not half_atoms or b % 2 == 0,
                     f"half_atoms takes codes of an even width, got {wdtype}")


class WgmmaLayouts(NamedTuple):
    """The register-A kernel's tilings of a k-tile (`wgmma_layouts`)."""

    bn: int  # columns of y a block computes
    bk: int  # rows of K a k-tile
    atoms: int  # the format's 32-column atoms among them
    lane_run: tuple[int, ...]  # the shape of a lane's bytes of an atom in the code view
    codes: tuple[int, ...]  # a k-tile of codes as loaded: [chunks, atoms or warps, ...]
    bytes: RegisterLayout  # ... and its layout
    code: RegisterLayout  # the codes as [bk, bn] elements of the weight type
    a: RegisterLayout  # the converted weights, the wgmma A operand [bn, bk]
    acc: RegisterLayout  # the accumulators, y^T [bn, bm] in f32
    xt: SharedLayout  # x^T's k-tile [bk, bm] in shared memory, K-major


def wgmma_layouts(act: DataType, bits: int, bm: int, bk: int, num_warps: int,
                  half_atoms: bool) -> WgmmaLayouts:
    """Which thread holds what of a k-tile (a compile-time helper): warp j holds its
    atom's codes (as loaded), its two halves as A fragments, and those rows of y^T;
    with half atoms, warp 2a + h holds half h of atom a (16 columns)."""
    warp_n = ATOM // 2 if half_atoms else ATOM  # columns a warp converts
    bn = warp_n * num_warps
    atoms = bn // ATOM
    chunks = bk // ATOM
    if half_atoms:  # half h of a lane's 4b bytes of atom a, per k-chunk
        byte_layout = local(chunks, 1, 1, 1, 1) * spatial(1, atoms, 1, 2, 1) \
            * spatial(1, 1, 32, 1, 1) * local(1, 1, 1, 1, 2 * bits)
        codes = (chunks, atoms, 32, 2, 2 * bits)
        code_layout = local(chunks, 1) * spatial(1, atoms) * half_atom_code_layout(bits)
    else:
        byte_layout = local(chunks, 1, 1, 1).spatial(1, num_warps, 32, 1) \
            .local(1, 1, 1, 4 * bits)
        codes = (chunks, num_warps, 32, 4 * bits)
        code_layout = local(chunks, 1) * spatial(1, num_warps) * atom_code_layout(bits)
    halves = 1 if half_atoms else 2
    return WgmmaLayouts(
        bn, bk, atoms, (2, 2 * bits) if half_atoms else (4 * bits,), codes, byte_layout,
        code_layout.permute((1, 0)),
        spatial(num_warps, 1) * local(halves, bk // 16) * mma_m16n8k16_a(),
        spatial(num_warps, 1) * local(halves, bm // 8) * mma_m16n8k16_c(),
        swizzled([bm, bk], act).permute((1, 0)))


def load_codes(gw, lay: WgmmaLayouts, k, atom_n0):
    """The block's codes of the k-tile at row `k` of K, from atom `atom_n0` on (a
    compile-time helper); of the pair of k-tiles from row `k` through `paired_views`'
    codes (6-D)."""
    if gw.ndim == len(lay.codes) + 1:  # (pair_k: atoms as (k-tile of the pair, atom))
        chunks, atoms, *rest = lay.codes
        shape = [chunks, 2, atoms // 2, *rest]
        return tv.load_global(gw, [k // ATOM, 0, atom_n0, *[0] * len(rest)], shape,
                              layout=lay.bytes.reshape(*shape))
    return tv.load_global(gw, [k // ATOM, atom_n0, *[0] * (len(lay.codes) - 2)],
                          list(lay.codes), layout=lay.bytes)


def paired_views(w, x, M, N, K, bk: int, lay: WgmmaLayouts):
    """`pair_k`'s views of the codes and x^T (a compile-time helper): codes
    [K / 32 - bk / 32, 2, Np / 32, 32, *lane_run], whose dimension 1 steps a k-tile (so
    a block's tile of 2 x (its 2 atoms) is the 8-warp tile of atoms, warps 4-7 on the
    pair's second k-tile), and x^T [2, K - bk, M], dimension 0 stepping a k-tile. The
    pairs start at multiples of 2 bk (a group holds whole pairs), so a pair lies wholly
    inside K or past it, which the shortened extents mask."""
    Np = tv.cdiv(N, ATOM) * ATOM
    lane = lay.lane_run
    run = math.prod(lane)  # a lane's bytes of a 32-row piece
    piece = Np // ATOM * 32 * run  # bytes between 32-row pieces of K
    gw = tv.global_view(w, [K // ATOM - bk // ATOM, 2, Np // ATOM, 32, *lane],
                        strides=[piece, bk // ATOM * piece, 32 * run, run,
                                 *(math.prod(lane[i + 1:]) for i in range(len(lane)))])
    gxt = tv.global_view(x, [2, K - bk, M], strides=[bk, 1, K])
    return gw, gxt


def codes_as(packed, wdtype: DataType, act: DataType, lay: WgmmaLayouts):
    """A k-tile of codes (`load_codes`) as `act` values, in A-fragment order."""
    return tv.cast(tv.view(packed, wdtype, [lay.bn, lay.bk], lay.code), act, lay.a)


def scaled(wt, scales, zeros, lay: WgmmaLayouts, pair_k: bool = False):
    """The converted weights `wt` minus their zero points (`zeros`, a shared `[bn, 1]`,
    or None) times their scales (`scales`, likewise). With `pair_k` the rows of `wt` are
    two k-tiles of the same `bn / 2` columns, which take the same `[bn / 2, 1]` scales."""
    if not pair_k:
        column = lay.a.reduce(1)
        if zeros is not None:
            wt = wt - tv.load_shared(zeros, [0, 0], [lay.bn, 1], layout=column)
        return wt * tv.load_shared(scales, [0, 0], [lay.bn, 1], layout=column)
    half = lay.bn // 2
    pairs = lay.a.reshape(2, half, lay.bk)  # rows (k-tile of the pair, column)
    column = pairs.reduce((0, 2))  # one column's scale, in both warpgroups

    def per_column(t):
        loaded = tv.load_shared(t, [0, 0], [half, 1], layout=column.squeeze(0))
        return tv.view(loaded, t.dtype, [1, half, 1], column)

    wt = tv.view(wt, wt.dtype, [2, half, lay.bk], pairs)
    if zeros is not None:
        wt = wt - per_column(zeros)
    return tv.view(wt * per_column(scales), wt.dtype, [lay.bn, lay.bk], lay.a)


def split_range(z, K, chunk: int, split_k: int):
    """Rows [begin, end) of K that split `z` of `split_k` takes: whole iterations of the
    main loop (`chunk` rows), the C = ceil(K / chunk) of them shared out so that splits
    differ by at most one (`end` may pass K). A compile-time helper."""
    iterations = tv.cdiv(K, chunk)
    return z * iterations // split_k * chunk, (z + 1) * iterations // split_k * chunk


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


def release(buffers) -> None:
    """Free the main loop's shared `buffers` behind a barrier every warp passes, so that
    a tile allocated next may take their bytes (a compile-time helper)."""
    for buf in buffers:
        tv.free_shared(buf)
    tv.sync()  # every warp is done with them


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


@tv.inline
def start_ktile(xs, ss, zs, buf, gxt, gs, gz, k, k_begin, k_len, m0, n0, group_size: int,
                split_k: int, before_copy, multicast: bool = False):
    """Start copying k-tile `k` of the block's split (`copy_ktile` at `k_begin + k`),
    after `before_copy`'s wait if any. A split copies nothing past its `k_len` rows: they
    are another split's (the main loop's look-ahead would read them, unused), which a
    consumer's waits for its own split's rows do not cover."""
    if split_k > 1:
        if k < k_len:
            _wait_and_copy(xs, ss, zs, buf, gxt, gs, gz, k_begin + k, m0, n0, group_size,
                           before_copy, multicast)
    else:
        _wait_and_copy(xs, ss, zs, buf, gxt, gs, gz, k, m0, n0, group_size, before_copy,
                       multicast)


def _wait_and_copy(xs, ss, zs, buf, gxt, gs, gz, k, m0, n0, group_size, before_copy,
                   multicast):
    if before_copy is not None:
        before_copy(k, m0)
    copy_ktile(xs, ss, zs, buf, gxt, gs, gz, k, m0, n0, group_size, multicast)


def copy_ktile(xs, ss, zs, buf, gxt, gs, gz, k, m0, n0, group_size, multicast=False):
    """Start copying k-tile `k` of x^T (rows from `m0`) into `xs[buf]` (with `multicast`
    once for the cluster), and the scales (and zeros) of its group for the columns from
    `n0` into `ss[buf]` (`zs[buf]`)."""
    tv.copy_async(xs[buf], gxt, [0, k, m0] if gxt.ndim == 3 else [k, m0],  # (3-D: pair_k)
                  multicast=multicast)
    copy_scales(ss, zs, buf, gs, gz, n0, k, group_size)


def copy_scales(ss, zs, buf, gs, gz, n0, k, group_size):
    """Start copying the scales (and zeros) of k-tile `k`'s group for the columns from
    `n0` into `ss[buf]` (`zs[buf]`) (a compile-time helper of the prefill kernels)."""
    tv.copy_async(ss[buf], gs, [n0, k // group_size])
    if zs is not None:
        tv.copy_async(zs[buf], gz, [n0, k // group_size])


qmm_wgmma_f16 = qmm_wgmma_kernel("f16")  # for `vmc compile kernels/qmm_wgmma.py:... --arch sm_90a`
