"""The schedule space of the quantized matmul (`kernels.qmm`, `kernels.qmm_staged`,
`kernels.qmm_wgmma`) and the default choice.

A `Schedule` is the kernel's compile-time tiling: `bm` rows of x per block (one mma
row tile, 8 or 16 rows swapped, serves a decode batch), `bk` rows of K per step (a multiple
of 32 dividing the group size), `num_warps` warps, `split_k` blocks along K (the last
of them to finish adds their f32 partial sums), whether the activations go through
shared memory (`x_shared`, two stages), how many k-tiles of weights are in flight
(`prefetch`), how many scale groups one iteration of the main loop covers (`unroll`:
with `unroll * group_size / bk` a multiple of `prefetch + 1` the registers in flight
rotate without copies), and `swap_ab`: compute `y^T = W^T x^T` with the weights as the mma A
operand, so that x pads to 8 rows instead of 16 (`bm` a multiple of 8): for M <= 8 half
the tensor-core work and accumulator registers. Those are the streaming kernel's
(`kernels.qmm`: each warp 32 columns and all `bm` rows, weights straight into
registers: decode). `staged` selects the kernel for many rows (`kernels.qmm_staged`:
`warps_m x num_warps / warps_m` warps of `bm / warps_m` rows and 32 columns, every
operand through `stages` shared-memory buffers: prefill); it takes none of `split_k`,
`x_shared`, `prefetch`, `unroll` and `swap_ab`. `wgmma` selects the prefill kernel for
Hopper (`kernels.qmm_wgmma`: warpgroups of 4 warps, each warp 32 columns and all `bm`
rows, x^T through `stages` shared buffers read by wgmma, `lead` k-tiles ahead (0:
`stages - 1`); `bk` 64 or 32); it takes `bm`, `bk`, `num_warps` (whole warpgroups),
`stages`, `lead`, `prefetch` (k-tiles of weight codes in flight in registers, 1..4; up
to 8 in the register-A kernel) and
`split_k` (blocks along K in whole loop iterations, their partial sums added by the last
as in the streaming kernel: 33..256 rows, where one row tile is too few blocks; the
shared-weights kernel's too, without a converting producer; with
`split_cluster` a tile's splits are one cluster adding their parts through shared
memory), or `stream_k` instead: `kernels.qmm_streamk`, `stream_k` blocks per SM sharing
every tile's loop iterations evenly (measured slower: not a candidate). `cluster_n` (2 or
4, unsplit): that many adjacent column tiles one cluster, a producer warp copying x's
tiles once for them all (TMA multicast).
With `half_atoms` (even widths) each warp converts 16 columns instead of 32, so that a
warpgroup's 64 columns are one wgmma over `bm` rows (256 in the tuned tiling: each weight
converted once per 256 rows, straight from registers). With `shared_weights` it is
`kernels.qmm_wgmma_shared` (the converted weights of a k-tile in shared memory, read by
every warpgroup's wgmmas: each weight converted once per `bm` rows; `lead`
1..stages-2). With `dequant` it is `kernels.qmm_dequant`: the weights
dequantized once into an f16/bf16 workspace, then a matmul of x by them with the
shared-weights kernel's pipeline (`bk` 64; `lead` 1..stages-2; no `prefetch`).

`candidates` lists the schedules worth timing for a problem (what the tuner compiles);
`default_schedule` is the choice without tuning: enough blocks to fill the GPU (split-K
when `N / 32` warps are too few), the smallest tile rows that cover M, one k-tile of
weights ahead; the staged kernel from `STAGED_FROM` rows on, or on Hopper
(`hopper=True`: sm_90a code runs) the wgmma kernel, with shared weights from its 256 rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import NamedTuple

SMS_H100 = 132  # streaming multiprocessors of an H100 SXM (the default's target)
# The version of the schedule space, part of the tuning table's keys: bumped whenever the
# candidates change (or a change to the kernels moves their times), so that problems tuned
# over an older space are tuned again instead of keeping a winner among fewer (or other)
# kernels.
SPACE_VERSION = 15
STAGED_FROM = 128  # rows from which the default is the staged kernel


@dataclass(frozen=True)
class Schedule:
    """A compile-time tiling of one of the quantized-matmul kernels (see the module
    docstring for what each field means and which kernel takes it)."""

    bm: int = 16
    bk: int = 32
    num_warps: int = 1
    split_k: int = 1
    x_shared: bool = True
    prefetch: int = 1
    swap_ab: bool = False
    staged: bool = False
    warps_m: int = 1
    stages: int = 2
    unroll: int = 1
    wgmma: bool = False
    lead: int = 0
    shared_weights: bool = False
    dequant: bool = False
    producer: int = 0
    half_atoms: bool = False
    stream_k: int = 0
    split_cluster: bool = False
    pair_k: bool = False
    cluster_n: int = 1

    def __post_init__(self) -> None:
        if self.staged and self.wgmma:
            raise ValueError(f"a schedule selects one kernel, staged or wgmma: {self!r}")
        many_rows = self.staged or self.wgmma
        prefetch = 1 if self.wgmma else self.prefetch  # (the wgmma kernels' own)
        split_k = 1 if self.wgmma else self.split_k  # (the register-A kernel's own)
        if many_rows and (split_k, self.x_shared, prefetch, self.swap_ab,
                          self.unroll) != (1, True, 1, False, 1):
            raise ValueError(f"a {'staged' if self.staged else 'wgmma'} schedule takes bm, "
                             f"bk, num_warps{', warps_m' if self.staged else ''}, stages"
                             f"{', lead, prefetch, split_k' if self.wgmma else ''} only, "
                             f"got {self!r}")
        if self.split_k > 1 and (self.dequant or self.producer):
            raise ValueError(f"split_k is the wgmma kernels' without dequant or a converting "
                             f"producer, got {self!r}")
        if self.stream_k and (not self.wgmma or self.shared_weights or self.dequant
                              or self.split_k > 1 or self.stream_k < 0):
            raise ValueError(f"stream_k (blocks per SM sharing the work evenly) is the "
                             f"register-A wgmma kernel's, without split_k, got {self!r}")
        if self.split_cluster and (not self.wgmma or self.shared_weights or self.dequant
                                   or self.split_k not in (2, 4, 8)):
            raise ValueError(f"split_cluster (a tile's splits one cluster) is the register-A "
                             f"wgmma kernel's, with split_k 2, 4 or 8, got {self!r}")
        if self.pair_k and (not self.wgmma or not self.half_atoms or self.num_warps != 8
                            or self.split_cluster or self.stream_k or self.shared_weights):
            raise ValueError(f"pair_k (two warpgroups on a pair of k-tiles) is the register-A "
                             f"wgmma kernel's with half atoms and 8 warps, got {self!r}")
        if self.cluster_n != 1 and (not self.wgmma or self.cluster_n not in (2, 4)
                                    or self.shared_weights or self.dequant or self.stream_k
                                    or self.split_k > 1 or self.pair_k):
            raise ValueError(f"cluster_n (column tiles sharing x's copies) is the register-A "
                             f"wgmma kernel's, 2 or 4, unsplit, got {self!r}")
        if self.wgmma and self.warps_m != 1:
            raise ValueError(f"warps_m is the staged kernel's, got {self!r}")
        if (self.lead or self.shared_weights or self.dequant or self.half_atoms) \
                and not self.wgmma:
            raise ValueError(f"lead, shared_weights, dequant and half_atoms are the wgmma "
                             f"kernel's, got {self!r}")
        if self.half_atoms and (self.shared_weights or self.dequant):
            raise ValueError(f"half_atoms is the wgmma kernel's with the weights in "
                             f"registers (no shared_weights or dequant), got {self!r}")
        if self.producer and not self.shared_weights:
            raise ValueError(f"a converting producer (its registers, `producer`) is the "
                             f"shared-weights kernel's, got {self!r}")
        if self.dequant and (self.shared_weights or self.prefetch != 1):
            raise ValueError(f"a dequant schedule converts no weights in the matmul: no "
                             f"shared_weights or prefetch, got {self!r}")
        if not many_rows and (self.warps_m, self.stages) != (1, 2):
            raise ValueError(f"warps_m and stages are the staged kernel's, got {self!r}")

    def constants(self) -> dict[str, int | bool]:
        """The compile-time constants of the kernel this schedule selects."""
        if self.staged:
            return dict(bm=self.bm, bk=self.bk, num_warps=self.num_warps,
                        warps_m=self.warps_m, stages=self.stages)
        if self.dequant:  # the matmul's (`kernels.qmm_dequant.wt_matmul_kernel`)
            return dict(bm=self.bm, bk=self.bk, num_warps=self.num_warps,
                        stages=self.stages, lead=self.lead)
        if self.stream_k:  # (`kernels.qmm_streamk`: `lead` 0 is its stages - 1)
            return dict(bm=self.bm, bk=self.bk, num_warps=self.num_warps,
                        stages=self.stages, lead=self.lead or self.stages - 1,
                        prefetch=self.prefetch) | self._changed("half_atoms")
        if self.wgmma:  # (its options passed where they are not their defaults)
            return dict(bm=self.bm, bk=self.bk, num_warps=self.num_warps,
                        stages=self.stages, lead=self.lead, prefetch=self.prefetch) \
                | self._changed("producer", "half_atoms", "split_k", "split_cluster",
                                "pair_k", "cluster_n")
        table = asdict(self)
        for name in ("staged", "warps_m", "stages", "wgmma", "lead", "shared_weights",
                     "dequant", "producer", "half_atoms", "stream_k", "split_cluster",
                     "pair_k", "cluster_n"):
            del table[name]
        return table

    def _changed(self, *names: str) -> dict[str, int | bool]:
        """The fields `names` whose values differ from their defaults."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name in names and getattr(self, f.name) != f.default}

    def fits(self, K: int, group_size: int) -> bool:
        """Whether the kernel's requirements hold for this K and group size."""
        if self.dequant:  # 64-row k-tiles in the matmul; the dequantization's are the
            # group's (`k_tile`), so only whole 32-row pieces of groups are asked for
            if K % group_size or group_size % 32 or self.bk != 64:
                return False
        elif self.bk % 32 or group_size % self.bk or K % 32 or K % group_size:
            return False
        if self.wgmma:  # whole warpgroups, wgmma's N, k-tiles of codes ahead: up to 8
            # in the register-A main loop (`qmm_wgmma.REGISTER_A_AHEAD`), 4 in the others
            register_a = not (self.shared_weights or self.dequant or self.stream_k)
            if not (self.bk in (32, 64) and self.num_warps % 4 == 0 and self.bm % 8 == 0
                    and 8 <= self.bm <= 256
                    and 1 <= self.prefetch <= (8 if register_a else 4)):
                return False
            if self.shared_weights or self.dequant:  # both operands in shared buffers,
                # rewritten behind the barrier (8 warps, 64-row k-tiles: 128 columns)
                columns = 32 * self.num_warps // (self.bk // 32)
                if self.producer and columns != 128:  # its warpgroup: an atom a warp
                    return False
                return (self.dequant or columns % 64 == 0) \
                    and 1 <= self.lead <= self.stages - 2 <= 4 \
                    and self._registers_and_split_fit(K, group_size)
            if self.stream_k and self.prefetch > self.stages:  # the codes run at most
                return False  # one unit (iteration) ahead
            if self.pair_k and (group_size % (2 * self.bk) or self.bm % 16):  # a pair
                return False  # within a group; half of x's rows to each warpgroup
            return 2 <= self.stages <= 6 and 0 <= self.lead < self.stages \
                and self._registers_and_split_fit(K, group_size)
        if self.staged:
            return self.num_warps % self.warps_m == 0 and \
                self.bm % (16 * self.warps_m) == 0 and 2 <= self.stages <= 6
        if K % (group_size * self.unroll) or self.split_k > K // (group_size * self.unroll):
            return False
        if self.bm % (8 if self.swap_ab else 16):
            return False
        return not self.x_shared or even_stages(self.unroll, group_size, self.bk)

    def _registers_and_split_fit(self, K: int, group_size: int) -> bool:
        """A wgmma kernel's accumulators, at most 128 a thread (more do not compile
        without spills: 256 x 128 of whole atoms in one warpgroup would take 256), and
        its K split: whole iterations of whole groups a split (the last block's sum then
        holds two tiles of at most 128 a thread). With `pair_k` each warpgroup holds the
        whole tile's columns until the pair's sums are added."""
        chunk = self.stages * self.bk * (2 if self.pair_k else 1)
        columns = self.block_columns * (2 if self.pair_k else 1)
        if self.bm * columns > 128 * 32 * self.num_warps:
            return False
        return self.split_k == 1 or not (chunk % group_size or self.split_k > K // chunk)

    @property
    def splits_k_kernel(self) -> bool:
        """Whether the kernel takes split-K's workspace and tile counters (after y):
        the streaming kernel and the wgmma kernels but the dequantize-then-multiply
        pair's, whatever their split (with `split_cluster` it reads neither)."""
        return not (self.staged or self.dequant)

    @property
    def block_columns(self) -> int:
        """Columns of y a block of the kernels that split K computes (`bn`): 32 a warp,
        16 with half atoms, half that with `pair_k` (both warpgroups on the same
        columns); with `shared_weights` (and the dequantize-then-multiply pair's matmul)
        32 a warp per 32 rows of the k-tile."""
        if self.shared_weights or self.dequant:
            return 32 * self.num_warps // (self.bk // 32)
        return (16 if self.half_atoms else 32) * self.num_warps // (2 if self.pair_k else 1)

    def __str__(self) -> str:
        if self.wgmma:
            kind = " shared_weights" if self.shared_weights else " dequant" if self.dequant \
                else " half_atoms" if self.half_atoms else ""
            return (f"wgmma{kind} bm={self.bm} "
                    f"bk={self.bk} warps={self.num_warps} stages={self.stages}"
                    f"{f' lead={self.lead}' if self.lead else ''}"
                    f"{f' prefetch={self.prefetch}' if self.prefetch > 1 else ''}"
                    f"{f' producer={self.producer}' if self.producer else ''}"
                    f"{f' split_k={self.split_k}' if self.split_k > 1 else ''}"
                    f"{' split_cluster' if self.split_cluster else ''}"
                    f"{' pair_k' if self.pair_k else ''}"
                    f"{f' cluster_n={self.cluster_n}' if self.cluster_n > 1 else ''}"
                    f"{f' stream_k={self.stream_k}' if self.stream_k else ''}")
        if self.staged:
            return (f"staged bm={self.bm} bk={self.bk} warps={self.num_warps} "
                    f"warps_m={self.warps_m} stages={self.stages}")
        return (f"bm={self.bm} bk={self.bk} warps={self.num_warps} split_k={self.split_k}"
                f"{'' if self.x_shared else ' x_global'}"
                f"{f' prefetch={self.prefetch}' if self.prefetch > 1 else ''}"
                f"{f' unroll={self.unroll}' if self.unroll > 1 else ''}"
                f"{' swap_ab' if self.swap_ab else ''}")


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


def staged(bm: int, bk: int, num_warps: int, warps_m: int, stages: int) -> Schedule:
    """The staged kernel's schedule with this tiling (the fields of a `StagedTile`)."""
    return Schedule(bm, bk, num_warps, staged=True, warps_m=warps_m, stages=stages)


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
DEEP_PREFETCH_BITS = 6
MIDDLE_TILES = (
    MiddleRows(rows=64, tiles=(
        MiddleTile(bm=64, num_warps=4, half_atoms=False, splits=(1, 2, 3, 4, 8)),
        MiddleTile(bm=64, num_warps=4, half_atoms=True, splits=(1, 2, 3, 4, 8), deep=True),
        MiddleTile(bm=64, num_warps=8, half_atoms=True, splits=(1,)))),
    MiddleRows(rows=256, tiles=(
        MiddleTile(bm=64, num_warps=4, half_atoms=False, splits=(1, 2, 4, 8)),
        MiddleTile(bm=64, num_warps=4, half_atoms=True, splits=(1, 2, 4, 8), deep=True),
        MiddleTile(bm=128, num_warps=4, half_atoms=True, splits=(1, 2, 4, 8), deep=True),
        MiddleTile(bm=128, num_warps=4, half_atoms=False, splits=(2,)),
        MiddleTile(bm=256, num_warps=4, half_atoms=True, splits=(1, 2)),
        MiddleTile(bm=256, num_warps=8, half_atoms=True, splits=(2,)),
        MiddleTile(bm=128, num_warps=8, half_atoms=True, splits=(1,), deep=True, pair_k=True),
        MiddleTile(bm=128, num_warps=8, half_atoms=True, splits=(1,), deep=True, pair_k=True,
                   stages=2))),
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


def wgmma(bm: int, num_warps: int, stages: int, group_size: int, lead: int = 0,
          prefetch: int = 1, shared_weights: bool = False, producer: int = 0,
          half_atoms: bool = False, split_k: int = 1, stream_k: int = 0,
          split_cluster: bool = False, pair_k: bool = False,
          cluster_n: int = 1) -> Schedule:
    """The Hopper kernel's schedule with this tiling (`kernels.qmm_wgmma`, with
    `half_atoms` 16 columns a warp, K split `split_k` ways, with `split_cluster` a tile's
    splits one cluster adding their parts in shared memory, with `cluster_n` column
    tiles one cluster sharing x's copies; with `stream_k`,
    `kernels.qmm_streamk` with that many blocks per SM; or with `shared_weights`
    `kernels.qmm_wgmma_shared`, whose weights a converting producer warpgroup of
    `producer` registers a thread converts when nonzero)."""
    return Schedule(bm, k_tile(group_size), num_warps, split_k, wgmma=True, stages=stages,
                    lead=lead, prefetch=prefetch, shared_weights=shared_weights,
                    producer=producer, half_atoms=half_atoms, stream_k=stream_k,
                    split_cluster=split_cluster, pair_k=pair_k, cluster_n=cluster_n)


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
    """The register-A wgmma kernel's tilings for 33..256 rows (`MIDDLE_TILES`, half atoms
    for even widths only), with their K splits."""
    table = next((m.tiles for m in MIDDLE_TILES if M <= m.rows), ())
    narrow = bits is not None and bits <= DEEP_PREFETCH_BITS
    return [wgmma(t.bm, t.num_warps, t.stages, group_size, lead=t.stages // 2,
                  prefetch=4 if t.deep and narrow else 2, half_atoms=t.half_atoms,
                  split_k=split, pair_k=t.pair_k)
            for t in table if not t.half_atoms or (bits or 1) % 2 == 0
            for split in t.splits]


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


def even_stages(unroll: int, group_size: int, bk: int) -> bool:
    """Whether the main loop's k-tiles (`unroll * group_size / bk`) alternate evenly
    between the activations' two shared-memory stages (the kernel's requirement for
    `x_shared`)."""
    return (unroll * group_size // bk) % 2 == 0


def k_tile(group_size: int) -> int:
    """`bk`: 64 rows when the group allows the two-stage pipeline with them (the faster
    wherever it fits), else 32."""
    return 64 if group_size % 128 == 0 else 32


def swap_rows(M: int) -> int:
    """`bm` of the swapped (`swap_ab`) kernel for M <= 16 rows: 8 or 16."""
    return 8 if M <= 8 else 16


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
