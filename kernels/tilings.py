"""The quantized matmul's schedules worth timing, and the choice without timing, from
measurements (docs/quantized-matmul.md, "Measurements"): the tilings of each kernel
that won some problem, as tables (`kernels.schedule` says what a schedule's fields mean).

`candidates` lists the schedules the tuner compiles and times for a problem;
`default_schedule` is the choice without tuning: enough blocks to fill the GPU (split-K
when `N / 32` warps are too few), the smallest tile rows that cover M, one k-tile of
weights ahead; the staged kernel from `STAGED_FROM` rows on, or on Hopper
(`hopper=True`: sm_90a code runs) the wgmma kernel, with shared weights from its 256 rows.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from tilevm.kernels.schedule import Schedule, even_stages, k_tile, staged, swap_rows, wgmma

SMS_H100 = 132  # streaming multiprocessors of an H100 SXM (the default's target)
# The version of the schedule space, part of the tuning table's keys: bumped whenever the
# candidates change (or a change to the kernels moves their times), so that problems tuned
# over an older space are tuned again instead of keeping a winner among fewer (or other)
# kernels.
SPACE_VERSION = 16
STAGED_FROM = 128  # rows from which the default is the staged kernel


class StagedTile(NamedTuple):
    """A tiling of the staged kernel (`kernels.qmm_staged`)."""

    bm: int
    bk: int
    num_warps: int
    warps_m: int
    stages: int


class WgmmaTile(NamedTuple):
    """A tiling of the Hopper kernels (`kernels.qmm_wgmma`, `kernels.qmm_wgmma_shared`);
    their `bk` follows the group size (`k_tile`)."""

    bm: int
    num_warps: int
    stages: int
    lead: int
    prefetch: int


class MiddleTile(NamedTuple):
    """A tiling of the register-A wgmma kernel between decode and prefill, with the K
    splits timed for it (x `stages // 2` k-tiles ahead, the codes two, or four where
    `deep` and they are at most `DEEP_PREFETCH_BITS` wide; `pair_k`: its two warpgroups
    on the two k-tiles of each pair)."""

    bm: int
    num_warps: int
    half_atoms: bool
    splits: tuple[int, ...]
    deep: bool = False
    pair_k: bool = False
    stages: int = 4


class MiddleRows(NamedTuple):
    """The `MiddleTile`s timed for problems of up to `rows` rows."""

    rows: int
    tiles: tuple[MiddleTile, ...]


class DequantTile(NamedTuple):
    """The matmul tiling of the dequantize-then-multiply pair (`kernels.qmm_dequant`)."""

    bm: int
    num_warps: int
    stages: int
    lead: int


# The staged kernel's tilings worth timing, each the best (or close to it) for some weight
# type in a prefill sweep. The defaults come first, 64-row then 32-row k-tiles: they
# compile without spills for every weight type (the others spill for odd widths).
STAGED_TILES = (
    StagedTile(bm=128, bk=64, num_warps=8, warps_m=2, stages=2),
    StagedTile(bm=128, bk=32, num_warps=8, warps_m=2, stages=3),
    StagedTile(bm=64, bk=32, num_warps=4, warps_m=1, stages=4),
    StagedTile(bm=128, bk=32, num_warps=4, warps_m=2, stages=4),
    StagedTile(bm=64, bk=32, num_warps=8, warps_m=1, stages=4),
    StagedTile(bm=128, bk=64, num_warps=8, warps_m=2, stages=3),
)


# The Hopper kernel's tilings worth timing, each the best on some prefill layer and type:
# 128 rows (smaller tiles lost); x one k-tile ahead of 2 stages (the wgmmas wait at each
# barrier), or one or two ahead of 4, which keeps a k-tile's wgmmas running while the
# next is converted; the last with the codes two k-tiles ahead, which helps int4
# (docs/quantized-matmul.md, "The kernel").
WGMMA_TILES = (
    WgmmaTile(bm=128, num_warps=4, stages=2, lead=0, prefetch=1),
    WgmmaTile(bm=128, num_warps=4, stages=4, lead=1, prefetch=1),
    WgmmaTile(bm=128, num_warps=4, stages=4, lead=2, prefetch=1),
    WgmmaTile(bm=128, num_warps=8, stages=4, lead=1, prefetch=1),
    WgmmaTile(bm=128, num_warps=8, stages=4, lead=2, prefetch=1),
    WgmmaTile(bm=128, num_warps=4, stages=4, lead=2, prefetch=2),
)
# The shared-weights kernel's tiling: 256 rows, 8 warps (128 columns), x two k-tiles
# ahead of four stages, the codes a loop iteration at a time (`prefetch == stages`: the
# registers come round without copies); 64-row k-tiles only (with 32-row ones a block
# would hold 256 columns: 256 accumulators a thread). It beat every `WGMMA_TILES` tiling
# at every type measured, so where it fits only the two best of those are timed beside
# it (`WGMMA_TILES_BESIDE_SHARED`).
WGMMA_SHARED_TILES = (WgmmaTile(bm=256, num_warps=8, stages=4, lead=2, prefetch=4),)
WGMMA_TILES_BESIDE_SHARED = (WGMMA_TILES[0], WGMMA_TILES[2])
# Up to 256 rows the shared-weights kernel with K split in two too: one row tile of the
# widest down layer is 64 blocks for 132 SMs, and there the split won; it lost on the
# other layers (docs/quantized-matmul.md).
SHARED_SPLIT_ROWS = 256
# The wgmma kernel with half atoms: 256 rows, 8 warps of 16 columns (128), x and the
# codes two k-tiles ahead of four stages. It takes any even width, and is timed for the
# widths whose conversions are dearest (`HALF_ATOM_BITS`), where it beat the
# shared-weights kernel; for 2- and 4-bit codes it did not.
WGMMA_HALF_ATOM_TILES = (WgmmaTile(bm=256, num_warps=8, stages=4, lead=2, prefetch=2),)
HALF_ATOM_BITS = (6, 8)
# Between decode and prefill (33..256 rows) on Hopper, the register-A wgmma kernel with K
# split, by row range: on layers with few column tiles (down, o) one row tile is too few
# blocks. Half atoms (even widths): one warpgroup (64 columns a block) beat 8 warps but
# for 64 x 128 unsplit up to 64 rows and 256 x 128 split in two at 256 rows (with 128 x
# 128 of whole atoms split in two: the widest down layer's picks); from 65 rows two
# warpgroups on the k-tile pairs of one 128 x 64 tile (`pair_k`, 4 or 2 stages: 8B o and
# down, 70B o). The prefill tilings, timed beside, stay ahead on the widest layers.
# Up to 64 rows a split in three too: with 96 column tiles (8B qkv) or 80 (70B qkv) it
# lays 2-3 blocks on every SM where two splits leave a third of them with one.
# Half atoms of 64 and 128 rows keep the codes four k-tiles ahead (`deep`) up to
# `DEEP_PREFETCH_BITS`: more weight bytes in flight for a block of one warp a scheduler;
# for 8-bit codes the registers it takes cost more blocks than it gains.
# Odd widths, which have no half atoms, get two warpgroups of whole atoms on the k-tile
# pairs instead (`pair_k` without half atoms: 64 x 128 unsplit, and at 256 rows 128 x 128
# split in two): for int3 they beat the pick by 11-16% on 8B qkv at 64 rows and 8B o and
# down at 256; for even widths the half-atom tilings stay ahead of them.
DEEP_PREFETCH_BITS = 6
MIDDLE_TILES = (
    MiddleRows(rows=64, tiles=(
        MiddleTile(bm=64, num_warps=4, half_atoms=False, splits=(1, 2, 3, 4, 8)),
        MiddleTile(bm=64, num_warps=4, half_atoms=True, splits=(1, 2, 3, 4, 8), deep=True),
        MiddleTile(bm=64, num_warps=8, half_atoms=True, splits=(1,)),
        MiddleTile(bm=64, num_warps=8, half_atoms=False, splits=(1,), pair_k=True))),
    MiddleRows(rows=256, tiles=(
        MiddleTile(bm=64, num_warps=4, half_atoms=False, splits=(1, 2, 4, 8)),
        MiddleTile(bm=64, num_warps=4, half_atoms=True, splits=(1, 2, 4, 8), deep=True),
        MiddleTile(bm=128, num_warps=4, half_atoms=True, splits=(1, 2, 4, 8), deep=True),
        MiddleTile(bm=128, num_warps=4, half_atoms=False, splits=(2,)),
        MiddleTile(bm=256, num_warps=4, half_atoms=True, splits=(1, 2)),
        MiddleTile(bm=256, num_warps=8, half_atoms=True, splits=(2,)),
        MiddleTile(bm=128, num_warps=8, half_atoms=True, splits=(1,), deep=True, pair_k=True),
        MiddleTile(bm=128, num_warps=8, half_atoms=True, splits=(1,), deep=True, pair_k=True,
                   stages=2),
        MiddleTile(bm=64, num_warps=8, half_atoms=False, splits=(1,), pair_k=True),
        MiddleTile(bm=128, num_warps=8, half_atoms=False, splits=(2,), pair_k=True))),
)
# The dequantize-then-multiply pair's matmul tiling: the shared-weights kernel's. Timed
# beside it where the workspace, W^T in f16/bf16, takes at most
# `DEQUANT_WORKSPACE_LIMIT` bytes.
DEQUANT_TILE = DequantTile(bm=256, num_warps=8, stages=4, lead=2)
DEQUANT_WORKSPACE_LIMIT = 1 << 30


def dequant_schedule() -> Schedule:
    """The dequantize-then-multiply pair's schedule (`DEQUANT_TILE`)."""
    t = DEQUANT_TILE
    return Schedule(t.bm, 64, t.num_warps, wgmma=True, stages=t.stages, lead=t.lead,
                    dequant=True)


def dequant_workspace(N: int, K: int) -> int:
    """Bytes of its workspace: W^T `[Np, K]` in f16/bf16, Np = N padded to 32."""
    return 2 * -(-N // 32) * 32 * K


def wgmma_tile(tile: WgmmaTile, group_size: int, *, shared_weights: bool = False,
               half_atoms: bool = False) -> Schedule:
    """`wgmma` of a `WGMMA_TILES` (or `WGMMA_SHARED_TILES`, `WGMMA_HALF_ATOM_TILES`)
    entry."""
    return wgmma(tile.bm, tile.num_warps, tile.stages, group_size, tile.lead, tile.prefetch,
                 shared_weights, half_atoms=half_atoms)


def half_atom_tiles(group_size: int, bits: int | None) -> list[Schedule]:
    """The wgmma kernel's half-atom tilings (`WGMMA_HALF_ATOM_TILES`) for codes of
    `bits` bits: none but for `HALF_ATOM_BITS`."""
    return [wgmma_tile(t, group_size, half_atoms=True) for t in WGMMA_HALF_ATOM_TILES
            if bits in HALF_ATOM_BITS]


def middle_tiles(M: int, group_size: int, bits: int | None) -> list[Schedule]:
    """The register-A wgmma kernel's tilings for 33..256 rows (`MIDDLE_TILES`: half atoms
    for even widths only, whole-atom k-tile pairs for odd widths only), with their K
    splits."""
    table = next((m.tiles for m in MIDDLE_TILES if M <= m.rows), ())
    narrow = bits is not None and bits <= DEEP_PREFETCH_BITS
    odd = (bits or 1) % 2 == 1

    def for_this_width(t: MiddleTile) -> bool:
        if t.half_atoms:
            return not odd
        return odd or not t.pair_k  # (whole-atom pairs stand in for half atoms)
    return [wgmma(t.bm, t.num_warps, t.stages, group_size, lead=t.stages // 2,
                  prefetch=4 if t.deep and narrow else 2, half_atoms=t.half_atoms,
                  split_k=split, pair_k=t.pair_k)
            for t in table if for_this_width(t) for split in t.splits]


def shared_weights_tiles(group_size: int, M: int | None = None) -> list[Schedule]:
    """The shared-weights kernel's tilings (`WGMMA_SHARED_TILES`) for this group size:
    none where its k-tiles would be 32 rows (256 columns, 256 accumulators a thread);
    for M up to 256 rows (`SHARED_SPLIT_ROWS`) each also with K split in two."""
    whole = [wgmma_tile(t, group_size, shared_weights=True) for t in WGMMA_SHARED_TILES
             if k_tile(group_size) == 64]
    split = [replace(s, split_k=2) for s in whole] if M is not None and \
        M <= SHARED_SPLIT_ROWS else []
    return whole + split


def row_tiles(M: int) -> tuple[int, ...]:
    """Values of `bm` worth trying for M rows (the streaming kernel). Not 64: its
    accumulators, partial sums and x fragments take more than 255 registers a thread, so
    it spills at every width and loses to two 32-row tiles by far."""
    if M <= 16:
        return (16,)
    if M <= 32:
        return (16, 32)
    return (32,)


def candidates(M: int, N: int, K: int, group_size: int, *, hopper: bool = False,
               bits: int | None = None) -> list[Schedule]:
    """The schedules the tuner times for this problem (all fit it); `hopper`: the GPU
    runs sm_90a code (wgmma); `bits`: the weight codes' width (`HALF_ATOM_BITS`: the
    half-atom tiling too). What the measurements behind it found
    (docs/quantized-matmul.md, "Measurements"): 64-row k-tiles win whenever the group
    allows the pipelines with them; up to 8 rows the swapped kernel won at every type;
    weights three k-tiles ahead (`deepen`) win on wide layers and lose on some small ones
    (more registers: fewer warps fit); for many rows on Hopper the wgmma kernels beat the
    staged one at every type, so above 256 rows only they are timed, with the
    dequantize-then-multiply pair where its workspace fits the limit. Between (33..256
    rows) on Hopper, the register-A wgmma kernel with K split (`middle_tiles`), beside the
    streaming kernel up to 64 rows and the 256-row tilings above."""
    bk = k_tile(group_size)
    found = []
    if hopper and 32 < M <= 256:  # the register-A kernel with K split: in between
        found += [s for s in middle_tiles(M, group_size, bits) if s.fits(K, group_size)]
    if M > 64 and hopper:
        shared = [s for s in shared_weights_tiles(group_size, M) if s.fits(K, group_size)]
        beside = WGMMA_TILES_BESIDE_SHARED if shared else WGMMA_TILES
        half = [s for s in half_atom_tiles(group_size, bits) if s.fits(K, group_size)]
        found += shared + half + [s for s in (wgmma_tile(t, group_size) for t in beside)
                                  if s.fits(K, group_size)]
        if M > 256 and dequant_workspace(N, K) <= DEQUANT_WORKSPACE_LIMIT:
            found += [s for s in (dequant_schedule(),) if s.fits(K, group_size)]
    if hopper and 64 < M <= 256:
        return list(dict.fromkeys(found))  # the staged and streaming kernels lost there
    if M > 64 and not (hopper and M > 256 and found):
        found += [s for s in (staged(**t._asdict()) for t in STAGED_TILES)
                  if s.fits(K, group_size)]
    if M > 256:
        return found  # the streaming kernel was slower at every type measured
    splits = (1, 2, 4, 8, 16) if M <= 64 else (1,)  # prefill has blocks enough
    if 8 < M <= 16:  # a split need not divide the groups: at 9..16 rows 6 filled the
        # GPU best on some layers and 16 never won, while up to 8 rows 16 won for odd
        # widths on some (both everywhere: too many candidates for the first call).
        splits = (1, 2, 4, 6, 8)
    if M <= 16:
        for warps in (2, 4):
            for split in splits:
                found.append(Schedule(swap_rows(M), bk, warps, split, swap_ab=True))
        if M <= 8:  # 16 rows: too many registers (spills at odd widths)
            found += [deepen(Schedule(8, bk, 2, split, swap_ab=True), K, group_size)
                      for split in splits]
    if M > 8 or not any(s.fits(K, group_size) for s in found):  # or small groups
        for bm in row_tiles(M):
            for warps in (2,) if M <= 16 else (2, 4):
                for split in splits:
                    s = Schedule(bm, bk, warps, split)
                    found.append(s if s.fits(K, group_size) else  # small groups
                                 Schedule(bm, bk, warps, split, x_shared=False))
    return list(dict.fromkeys(s for s in found if s.fits(K, group_size)))


def deepen(s: Schedule, K: int, group_size: int) -> Schedule:
    """`s` with three k-tiles of weights in flight and two groups per iteration of the
    main loop (so the registers in flight rotate without copies), when that fits the
    problem; else `s`."""
    deep = replace(s, prefetch=3, unroll=2)
    return deep if deep.fits(K, group_size) else s


def default_schedule(M: int, N: int, K: int, group_size: int,
                     sms: int = SMS_H100, *, hopper: bool = False,
                     bits: int | None = None) -> Schedule:
    """A good schedule without timing anything (see the module docstring; `bits`: the
    weight codes' width)."""
    # The tuner's usual picks: 64-row k-tiles when the group allows the two-stage
    # pipeline with them; decode (M <= 16) swapped, 2 warps (64 columns) per block (4 on
    # layers wide enough not to split K); prefill 4 warps (128 columns) per block for
    # wide layers.
    if M >= STAGED_FROM and hopper:
        # For 6- and 8-bit codes the half-atom tiling, else the shared-weights kernel,
        # where it fits and fills its 256-row tiles (the tuner's pick at every type
        # measured for many rows); else the first wgmma tiling.
        wide = [s for s in half_atom_tiles(group_size, bits) + shared_weights_tiles(
            group_size) if M >= s.bm]
        for tile in wide + [wgmma_tile(WGMMA_TILES[0], group_size)]:
            if tile.fits(K, group_size):
                return tile
    if M >= STAGED_FROM:
        for tile in (staged(**t._asdict()) for t in STAGED_TILES[:2]):
            if tile.fits(K, group_size):
                return tile
    bk = k_tile(group_size)
    x_shared = even_stages(1, group_size, bk)
    swap_ab = M <= 16 and x_shared
    if swap_ab:
        # Up to 8 rows 4 warps, one k-tile of weights ahead: the tuner's pick on most
        # layers and types. The deeper pipeline (`deepen`) won only on wide layers, and
        # its register count sits at the limit that lets 16 warps share an SM, so a few
        # more registers (a costlier conversion) make it much slower.
        bm = swap_rows(M)
        warps = 4 if bm == 8 else 2
    else:
        bm, warps = row_tiles(M)[0], 4 if N >= 8192 else 2
    blocks = -(-N // (32 * warps)) * -(-M // bm)
    split = 1
    while blocks * split < 4 * sms and split < 16 and \
            Schedule(bm, bk, warps, split * 2, x_shared, swap_ab=swap_ab).fits(K, group_size):
        split *= 2
    return Schedule(bm, bk, warps, split, x_shared, swap_ab=swap_ab)
