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
  the blocks running at once share weight tiles in L2 (`kernels.wgmma_grid`);
- with `pair_k` (two warpgroups) a block computes 64 columns (half atoms) or 128 (whole
  atoms, any width) and its
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
from tilevm.kernels.qmm import activation_type, fetch_ahead, shift_ahead
from tilevm.kernels.weight_format import ATOM, atom_code_layout, half_atom_code_layout
from tilevm.kernels.wgmma_epilogue import release, store_output
from tilevm.kernels.wgmma_grid import block_rows, block_tile
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
    those columns). With `pair_k` (two warpgroups) the block's warpgroups take the two
    k-tiles of each pair (2t, 2t + 1) of one 64- or 128-column tile (`paired_views`;
    a dot with b's two matrices), and `acc` is their sum (module docstring). With
    `cluster_n` (2 or 4) that many adjacent column tiles are one cluster whose x tiles a
    producer warp copies once for all of them (TMA multicast)."""
    b = wdtype.bits
    lead = lead or stages - 1
    check_tiling(wdtype, group_size, bm, bk, num_warps, stages, group_m, lead, prefetch,
                 half_atoms, REGISTER_A_AHEAD)
    tv.static_assert(not pair_k or (num_warps == 8 and bm % 16 == 0
                                    and group_size % (2 * bk) == 0),
                     f"pair_k takes two warpgroups (num_warps=8), rows of x "
                     f"in 16s (bm={bm}: each warpgroup ends with half of them) and pairs of "
                     f"k-tiles within a group ({2 * bk} rows dividing {group_size})")
    tv.static_assert(cluster_n in (1, 2, 4) and (cluster_n == 1 or (
        split_k == 1 and not pair_k and before_copy is None and before_loads is None)),
                     f"cluster_n={cluster_n} must be 1, 2 or 4, and more than 1 only "
                     f"without split_k, pair_k or waits before the copies")
    shared_x = cluster_n > 1  # (x's tiles copied once for the cluster's blocks)
    if shared_x:  # (a producer warp issues the copies: x's multicast to the cluster)
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
                    group_size, split_k, before_copy, shared_x)
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
                        shared_x)
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
