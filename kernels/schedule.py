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
`stages`, `lead`, `prefetch` (k-tiles of weight codes in flight in registers, 1..4) and
`split_k` (blocks along K in whole loop iterations, their partial sums added by the last
as in the streaming kernel: 33..256 rows, where one row tile is too few blocks).
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

from dataclasses import asdict, dataclass, replace

SMS_H100 = 132  # streaming multiprocessors of an H100 SXM (the default's target)
# The version of the schedule space, part of the tuning table's keys: bumped when the
# candidates change (2: the wgmma kernel; 3: its `lead` tilings, and the shared-weights
# kernel; 4: codes prefetched further ahead in the Hopper kernels; 5: beside the
# shared-weights kernel only two wgmma tilings; 6: its codes a loop iteration at a time;
# 7: odd widths' codes paired 16 bits apart, which moved their kernels' times; 8: the
# dequantize-then-multiply pair; 9: the wgmma kernel with half atoms for 8-bit codes; 10:
# and for 6-bit codes, with each half atom's codes one run of a lane's bytes; 11: its K
# split between 33 and 256 rows on Hopper, and no 64-row tiles of the streaming kernel), so
# problems tuned over an older space are tuned again instead of keeping a winner among
# fewer (or other) kernels.
SPACE_VERSION = 11
STAGED_FROM = 128  # rows from which the default is the staged kernel


@dataclass(frozen=True)
class Schedule:
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
        if self.split_k > 1 and (self.shared_weights or self.dequant):
            raise ValueError(f"split_k is the register-A wgmma kernel's (no shared_weights "
                             f"or dequant), got {self!r}")
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
        if self.wgmma:
            table = dict(bm=self.bm, bk=self.bk, num_warps=self.num_warps,
                         stages=self.stages, lead=self.lead, prefetch=self.prefetch)
            return table | ({"producer": self.producer} if self.producer else {}) \
                | ({"half_atoms": True} if self.half_atoms else {}) \
                | ({"split_k": self.split_k} if self.split_k > 1 else {})
        table = asdict(self)
        for name in ("staged", "warps_m", "stages", "wgmma", "lead", "shared_weights",
                     "dequant", "producer", "half_atoms"):
            del table[name]
        return table

    def fits(self, K: int, group_size: int) -> bool:
        """Whether the kernel's requirements hold for this K and group size."""
        if self.dequant:  # 64-row k-tiles in the matmul; the dequantization's are the
            # group's (`k_tile`), so only whole 32-row pieces of groups are asked for
            if K % group_size or group_size % 32 or self.bk != 64:
                return False
        elif self.bk % 32 or group_size % self.bk or K % 32 or K % group_size:
            return False
        if self.wgmma:  # whole warpgroups, wgmma's N, 1..4 k-tiles of codes ahead
            if not (self.bk in (32, 64) and self.num_warps % 4 == 0 and self.bm % 8 == 0
                    and 8 <= self.bm <= 256 and 1 <= self.prefetch <= 4):
                return False
            if self.shared_weights or self.dequant:  # both operands in shared buffers,
                # rewritten behind the barrier (8 warps, 64-row k-tiles: 128 columns)
                columns = 32 * self.num_warps // (self.bk // 32)
                if self.producer and columns != 128:  # its warpgroup: an atom a warp
                    return False
                return (self.dequant or columns % 64 == 0) \
                    and 1 <= self.lead <= self.stages - 2 <= 4
            if self.split_k > 1:  # whole iterations of whole groups a split; the last
                # block's sum holds two tiles of partial sums: at most 128 a thread each
                chunk = self.stages * self.bk
                if chunk % group_size or self.split_k > K // chunk or \
                        self.bm * self.block_columns > 128 * 32 * self.num_warps:
                    return False
            return 2 <= self.stages <= 6 and 0 <= self.lead < self.stages
        if self.staged:
            return self.num_warps % self.warps_m == 0 and \
                self.bm % (16 * self.warps_m) == 0 and 2 <= self.stages <= 6
        if K % (group_size * self.unroll) or self.split_k > K // (group_size * self.unroll):
            return False
        if self.bm % (8 if self.swap_ab else 16):
            return False
        return not self.x_shared or even_stages(self.unroll, group_size, self.bk)

    @property
    def block_columns(self) -> int:
        """Columns of y a block of the kernels that split K computes (`bn`: the
        streaming kernel's and the register-A wgmma kernel's): 32 a warp, 16 with half
        atoms."""
        return (16 if self.half_atoms else 32) * self.num_warps

    def __str__(self) -> str:
        if self.wgmma:
            kind = " shared_weights" if self.shared_weights else " dequant" if self.dequant \
                else " half_atoms" if self.half_atoms else ""
            return (f"wgmma{kind} bm={self.bm} "
                    f"bk={self.bk} warps={self.num_warps} stages={self.stages}"
                    f"{f' lead={self.lead}' if self.lead else ''}"
                    f"{f' prefetch={self.prefetch}' if self.prefetch > 1 else ''}"
                    f"{f' producer={self.producer}' if self.producer else ''}"
                    f"{f' split_k={self.split_k}' if self.split_k > 1 else ''}")
        if self.staged:
            return (f"staged bm={self.bm} bk={self.bk} warps={self.num_warps} "
                    f"warps_m={self.warps_m} stages={self.stages}")
        return (f"bm={self.bm} bk={self.bk} warps={self.num_warps} split_k={self.split_k}"
                f"{'' if self.x_shared else ' x_global'}"
                f"{f' prefetch={self.prefetch}' if self.prefetch > 1 else ''}"
                f"{f' unroll={self.unroll}' if self.unroll > 1 else ''}"
                f"{' swap_ab' if self.swap_ab else ''}")


# The staged kernel's tilings worth timing (bm, bk, num_warps, warps_m, stages), from an
# H100 sweep at M = 4096 (int4, int3, f6e3m2, int8; each was the best or within 5% of it
# for one type). The defaults come first, 64-row then 32-row k-tiles: they compile
# without spills for every weight type (the others reach 255 registers for odd widths).
STAGED_TILES = ((128, 64, 8, 2, 2), (128, 32, 8, 2, 3), (64, 32, 4, 1, 4),
                (128, 32, 4, 2, 4), (64, 32, 8, 1, 4), (128, 64, 8, 2, 3))


def staged(bm: int, bk: int, num_warps: int, warps_m: int, stages: int) -> Schedule:
    """The staged kernel's schedule with this tiling (the order of `STAGED_TILES`)."""
    return Schedule(bm, bk, num_warps, staged=True, warps_m=warps_m, stages=stages)


# The Hopper kernel's tilings worth timing (bm, num_warps, stages, lead, prefetch), from
# H100 sweeps at M = 4096 (int4, int3, f6e3m2, int8 on 8B qkv and the 70B layers): 128
# rows (128 accumulators per thread; 64- and 96-row tiles lost 10-30%, and 64 rows with
# three blocks an SM, 168 registers, took 1.17-1.48x the time); x copied one k-tile
# ahead into 2 stages (the wgmmas wait at each barrier) or one or two ahead into 4,
# which keeps a k-tile's wgmmas running while the next is converted (each the best on
# some layers; 0.983x the time of the earlier three tilings,
# bench/results/qmm_h100_prefill_wgmma_overlap/); 3 stages, or 4 with two warpgroups
# and the barrier waiting, won no case there. The codes one k-tile ahead, and two in
# (128, 4, 4, 2): int4 0.925x the time of one (0.91-0.94), int3 1.01x, f6e3m2 0.99x,
# int8 spills (bench/results/qmm_h100_prefill_prefetch/).
WGMMA_TILES = ((128, 4, 2, 0, 1), (128, 4, 4, 1, 1), (128, 4, 4, 2, 1), (128, 8, 4, 1, 1),
               (128, 8, 4, 2, 1), (128, 4, 4, 2, 2))
# The shared-weights kernel's (bm, num_warps, stages, lead, prefetch): 256 rows, 8 warps
# (128 columns), x two k-tiles ahead of four stages (H100: int4 0.90-0.93x the time of
# the better of (128,4,2) and (128,4,4,2) on four of five layers, the other types
# 0.96-1.11x; 3 stages one ahead, or 128 rows, 1.3-1.6x; bench/results/
# qmm_h100_prefill_shared_weights/); the codes three k-tiles ahead (4 stages: the
# registers come round without copies): against one, int4 0.953x the time, int3 0.970,
# f6e3m2 0.988, int8 0.992 (204-217 registers; bench/results/qmm_h100_prefill_prefetch/);
# four, fetched a loop iteration at a time (`prefetch == stages`), against three: int4
# 0.981x, int3 0.970, f6e3m2 1.005, int8 0.981 (212-233 registers;
# bench/results/qmm_h100_prefill_copy_order/batch_ab.*).
# With 64-row k-tiles only (32: 256 columns, 256 accumulators a thread). With its copies
# issued right after the `dot` it beat every `WGMMA_TILES` tiling at every type measured
# (int4, int3, f6e3m2, int8; 5-22%, bench/results/qmm_h100_prefill_copy_order/), so where
# it fits only the two best of those are timed beside it (`WGMMA_TILES_BESIDE_SHARED`).
WGMMA_SHARED_TILES = ((256, 8, 4, 2, 4),)
WGMMA_TILES_BESIDE_SHARED = (WGMMA_TILES[0], WGMMA_TILES[2])  # (128,4,2), (128,4,4,2)
# The wgmma kernel with half atoms (bm, num_warps, stages, lead, prefetch): 256 rows,
# 8 warps of 16 columns (128), x two k-tiles ahead of four stages, the codes two ahead
# (211 registers). H100, M = 4096, int8 on 8B qkv, 70B o and gate_up: 0.92-1.00x
# the time of the shared-weights kernel's tuned tiling, geomean 0.95-0.97 in each of
# three rounds; the codes one or three ahead, x one ahead, or six stages were slower
# (bench/results/qmm_h100_prefill_half_atoms/).
WGMMA_HALF_ATOM_TILES = ((256, 8, 4, 2, 2),)
# The widths it is timed for (the kernel takes any even width): for 6-bit codes too it
# beat the shared-weights kernel (H100, f6e3m2: 0.92-0.95x the time on 8B qkv and 70B o,
# 0.96-1.02x on gate_up); for 2- and 4-bit codes, whose conversions are cheaper, it was
# 1.00-1.06x slower (bench/results/qmm_h100_prefill_half_atoms_even/).
HALF_ATOM_BITS = (6, 8)
# Between decode and prefill (33..256 rows) on Hopper, the register-A wgmma kernel with
# K split: (bm, num_warps, half_atoms, splits), 4 stages, x and the codes two k-tiles
# ahead, for up to 64 and up to 256 rows; half atoms for even widths. On layers
# with few column tiles (down, o) one row tile is too few blocks for the GPU. H100
# (bench/results/qmm_h100_mid_m_splitk/), against the candidates before them:
# - 64 x 128 (4 warps), and 64 x 128 and 128 x 128 of half atoms (8 warps), split 1-8:
#   M = 64 and 256 on 8B down, 70B down and qkv, int4/int3/int8/f6e3m2, 0.63-0.93x the
#   time on down, 0.90-1.04x on 70B qkv at 64 rows (`splitk.jsonl`);
# - the wide tiles split in two (128 partial sums a thread beside the accumulator's 128:
#   254 registers, no spills but int8's 128 x 128: 48 bytes): 70B down at 256 rows
#   0.81-0.86x the time (`wide.jsonl`);
# - one warpgroup of half atoms (64 columns a block) beat the 8-warp half-atom tiles on
#   8B down and o, 70B o and qkv: at 64 rows 64 x 64 split 2 or 4 best in 10 of 12 cells
#   (0.87-0.98x the time), at 256 rows 256 x 64 (split 1 or 2) or 128 x 64 best but on
#   70B qkv (`narrow.jsonl`); so the 8-warp ones are gone but 64 x 128 without a split,
#   the official run's pick on 8B qkv (int8, f6e3m2) and 70B gate_up (f6e3m2) at 64 rows,
#   which the narrow sweep did not time.
# At 256 rows on 70B qkv the 256-row tilings without a split stay 1.2-1.6x faster.
MIDDLE_TILES = (  # (up to M rows, tilings)
    (64, ((64, 4, False, (1, 2, 4, 8)), (64, 4, True, (1, 2, 4, 8)), (64, 8, True, (1,)))),
    (256, ((64, 4, False, (1, 2, 4, 8)), (64, 4, True, (1, 2, 4, 8)),
           (128, 4, True, (1, 2, 4, 8)), (128, 4, False, (2,)), (256, 4, True, (1, 2)),
           (256, 8, True, (2,)))))
# The dequantize-then-multiply pair's matmul tiling (bm, num_warps, stages, lead): the
# shared-weights kernel's (`kernels.qmm_dequant`). Timed beside it where the workspace,
# W^T in f16/bf16, takes at most `DEQUANT_WORKSPACE_LIMIT` bytes (70B gate_up: 940 MB).
DEQUANT_TILE = (256, 8, 4, 2)
DEQUANT_WORKSPACE_LIMIT = 1 << 30


def dequant_schedule() -> Schedule:
    """The dequantize-then-multiply pair's schedule (`DEQUANT_TILE`)."""
    bm, num_warps, stages, lead = DEQUANT_TILE
    return Schedule(bm, 64, num_warps, wgmma=True, stages=stages, lead=lead, dequant=True)


def dequant_workspace(N: int, K: int) -> int:
    """Bytes of its workspace: W^T `[Np, K]` in f16/bf16, Np = N padded to 32."""
    return 2 * -(-N // 32) * 32 * K


def wgmma(bm: int, num_warps: int, stages: int, group_size: int, lead: int = 0,
          prefetch: int = 1, shared_weights: bool = False, producer: int = 0,
          half_atoms: bool = False, split_k: int = 1) -> Schedule:
    """The Hopper kernel's schedule with this tiling (`kernels.qmm_wgmma`, with
    `half_atoms` 16 columns a warp, K split `split_k` ways; or with `shared_weights`
    `kernels.qmm_wgmma_shared`, whose weights a converting producer warpgroup of
    `producer` registers a thread converts when nonzero)."""
    return Schedule(bm, k_tile(group_size), num_warps, split_k, wgmma=True, stages=stages,
                    lead=lead, prefetch=prefetch, shared_weights=shared_weights,
                    producer=producer, half_atoms=half_atoms)


def wgmma_tile(tile: tuple[int, int, int, int, int], group_size: int, *,
               shared_weights: bool = False, half_atoms: bool = False) -> Schedule:
    """`wgmma` of a `WGMMA_TILES` (or `WGMMA_SHARED_TILES`, `WGMMA_HALF_ATOM_TILES`)
    entry."""
    bm, num_warps, stages, lead, prefetch = tile
    return wgmma(bm, num_warps, stages, group_size, lead, prefetch, shared_weights,
                 half_atoms=half_atoms)


def half_atom_tiles(group_size: int, bits: int | None) -> list[Schedule]:
    """The wgmma kernel's half-atom tilings (`WGMMA_HALF_ATOM_TILES`) for codes of
    `bits` bits: none but for `HALF_ATOM_BITS`."""
    return [wgmma_tile(t, group_size, half_atoms=True) for t in WGMMA_HALF_ATOM_TILES
            if bits in HALF_ATOM_BITS]


def middle_tiles(M: int, group_size: int, bits: int | None) -> list[Schedule]:
    """The register-A wgmma kernel's tilings for 33..256 rows (`MIDDLE_TILES`, half atoms
    for even widths only), with their K splits."""
    table = next((tiles for rows, tiles in MIDDLE_TILES if M <= rows), ())
    return [wgmma(bm, warps, 4, group_size, lead=2, prefetch=2, half_atoms=half,
                  split_k=split)
            for bm, warps, half, splits in table if not half or (bits or 1) % 2 == 0
            for split in splits]


def shared_weights_tiles(group_size: int) -> list[Schedule]:
    """The shared-weights kernel's tilings (`WGMMA_SHARED_TILES`) for this group size:
    none where its k-tiles would be 32 rows (256 columns, 256 accumulators a thread)."""
    return [wgmma_tile(t, group_size, shared_weights=True) for t in WGMMA_SHARED_TILES
            if k_tile(group_size) == 64]


def row_tiles(M: int) -> tuple[int, ...]:
    """Values of `bm` worth trying for M rows (the streaming kernel). Not 64: its
    accumulators, partial sums and x fragments take more than 255 registers a thread
    (ptxas 13.0: 1.3-1.6 KB of spills on sm_90a, at every width), and at M = 64 it took
    16x the time of two 32-row tiles (H100, `bench/results/qmm_h100_mid_m_splitk/`)."""
    if M <= 16:
        return (16,)
    if M <= 32:
        return (16, 32)
    return (32,)


def candidates(M: int, N: int, K: int, group_size: int, *, hopper: bool = False,
               bits: int | None = None) -> list[Schedule]:
    """The schedules the tuner times for this problem (all fit it); `hopper`: the GPU
    runs sm_90a code (wgmma); `bits`: the weight codes' width (`HALF_ATOM_BITS`: the
    half-atom tiling too). Measured on an H100 and an H200 (bench/results): 64-row
    k-tiles win whenever the group allows the pipelines with them; up to 8 rows the
    swapped kernel won at every type; weights three k-tiles ahead (`deepen`) win on wide
    layers and lose a few percent on some small ones (fewer warps fit: more registers);
    from 4096 rows on an H100 the wgmma kernel beat the staged one at every type
    measured (by 1.3 to 1.8x), so there it is the only one timed; above 256 rows the
    dequantize-then-multiply pair too, where its workspace fits the limit. Between
    (33..256 rows) on Hopper, the register-A wgmma kernel with K split (`middle_tiles`),
    beside the streaming kernel up to 64 rows and the 256-row tilings above."""
    bk = k_tile(group_size)
    found = []
    if hopper and 32 < M <= 256:  # the register-A kernel with K split: in between
        found += [s for s in middle_tiles(M, group_size, bits) if s.fits(K, group_size)]
    if M > 64 and hopper:
        shared = [s for s in shared_weights_tiles(group_size) if s.fits(K, group_size)]
        beside = WGMMA_TILES_BESIDE_SHARED if shared else WGMMA_TILES
        half = [s for s in half_atom_tiles(group_size, bits) if s.fits(K, group_size)]
        found += shared + half + [s for s in (wgmma_tile(t, group_size) for t in beside)
                                  if s.fits(K, group_size)]
        if M > 256 and dequant_workspace(N, K) <= DEQUANT_WORKSPACE_LIMIT:
            found += [s for s in (dequant_schedule(),) if s.fits(K, group_size)]
    if hopper and 64 < M <= 256:
        return list(dict.fromkeys(found))  # the staged and streaming kernels lost there
    if M > 64 and not (hopper and M > 256 and found):
        found += [s for s in (staged(*t) for t in STAGED_TILES) if s.fits(K, group_size)]
    if M > 256:
        return found  # the streaming kernel was slower at every type (bench/results)
    splits = (1, 2, 4, 8, 16) if M <= 64 else (1,)  # prefill has blocks enough
    if 8 < M <= 16:  # a split need not divide the groups: at 16 rows 6 filled the GPU
        # best on some layers (H100 int4, 70B qkv: 8% over 4 or 8) and 16 never won; up
        # to 8 rows 16 won for odd widths on 70B qkv and down. (Both everywhere: 18
        # candidates, a first call of 21.7 s for f6e3m2, over the 20 s budget.)
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
    """`bk`: 64 rows when the group allows the two-stage pipeline with them (measured
    best on an H100 and an H200), else 32."""
    return 64 if group_size % 128 == 0 else 32


def swap_rows(M: int) -> int:
    """`bm` of the swapped (`swap_ab`) kernel for M <= 16 rows: 8 or 16."""
    return 8 if M <= 8 else 16


def default_schedule(M: int, N: int, K: int, group_size: int,
                     sms: int = SMS_H100, *, hopper: bool = False,
                     bits: int | None = None) -> Schedule:
    """A good schedule without timing anything (see the module docstring; `bits`: the
    weight codes' width)."""
    # Measured on an H100 (bench/results): 64-row k-tiles when the group allows the
    # two-stage pipeline with them; decode (M <= 16) swapped, 2 warps (64 columns) per
    # block (4 on layers wide enough not to split K); prefill 4 warps (128 columns) per
    # block for wide layers.
    if M >= STAGED_FROM and hopper:
        # For 6- and 8-bit codes the half-atom tiling, else the shared-weights kernel,
        # where it fits and fills its 256-row tiles (the tuner's pick at every type
        # measured at M = 4096); else the first wgmma tiling.
        wide = [s for s in half_atom_tiles(group_size, bits) + shared_weights_tiles(
            group_size) if M >= s.bm]
        for tile in wide + [wgmma_tile(WGMMA_TILES[0], group_size)]:
            if tile.fits(K, group_size):
                return tile
    if M >= STAGED_FROM:
        for tile in (staged(*t) for t in STAGED_TILES[:2]):
            if tile.fits(K, group_size):
                return tile
    bk = k_tile(group_size)
    x_shared = even_stages(1, group_size, bk)
    swap_ab = M <= 16 and x_shared
    if swap_ab:
        # Up to 8 rows 4 warps, one k-tile of weights ahead: the tuner's pick on most
        # layers and types (H100, 2026-11-21). The deeper pipeline (`deepen`) won only on
        # wide layers, and its registers sit at the 128 that let 16 warps share an SM: a
        # conversion change that cost a few (int4: 136) made it 25-40% slower.
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
