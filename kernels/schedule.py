"""The schedule of the quantized matmul (`kernels.qmm`, `kernels.qmm_staged`,
`kernels.qmm_wgmma` and the kernels beside it): what each field selects, what each
kernel requires of them (`Schedule.fits`), and their constructors.

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

The schedules the tuner times, and the choice without timing: `kernels.tilings`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


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
        if self.pair_k and (not self.wgmma or self.num_warps != 8
                            or self.split_cluster or self.stream_k or self.shared_weights):
            raise ValueError(f"pair_k (two warpgroups on a pair of k-tiles) is the register-A "
                             f"wgmma kernel's with 8 warps, got {self!r}")
        if self.cluster_n != 1 and (not self.wgmma or self.cluster_n not in (2, 4)
                                    or self.producer or self.dequant or self.stream_k
                                    or self.split_k > 1 or self.pair_k):
            raise ValueError(f"cluster_n (column tiles sharing x's copies) is the register-A "
                             f"and shared-weights wgmma kernels', 2 or 4, unsplit, without "
                             f"a converting producer, got {self!r}")
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


def staged(bm: int, bk: int, num_warps: int, warps_m: int, stages: int) -> Schedule:
    """The staged kernel's schedule with this tiling (the fields of a `StagedTile`)."""
    return Schedule(bm, bk, num_warps, staged=True, warps_m=warps_m, stages=stages)


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
