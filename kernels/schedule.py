"""The schedule space of the quantized matmul (`kernels.qmm`) and the default choice.

A `Schedule` is the kernel's compile-time tiling: `bm` rows of x per block (16 serves
every decode batch M <= 16 with one mma row tile), `bk` rows of K per step (a multiple
of 32 dividing the group size), `num_warps` warps of 32 columns each, `split_k` blocks
along K (their f32 partial sums are added by `splitk_sum_kernel`), and whether the
activations go through shared memory (`x_shared`, two stages).

`candidates` lists the schedules worth timing for a problem (what the tuner compiles);
`default_schedule` is the choice without tuning: enough blocks to fill the GPU (split-K
when `N / 32` warps are too few), the smallest tile rows that cover M.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

SMS_H100 = 132  # streaming multiprocessors of an H100 SXM (the default's target)


@dataclass(frozen=True)
class Schedule:
    bm: int = 16
    bk: int = 32
    num_warps: int = 1
    split_k: int = 1
    x_shared: bool = True
    prefetch: int = 1

    def constants(self) -> dict[str, int | bool]:
        """The kernel's compile-time constants for this schedule."""
        return asdict(self)

    def fits(self, K: int, group_size: int) -> bool:
        """Whether the kernel's requirements hold for this K and group size."""
        if self.bk % 32 or group_size % self.bk or K % 32:
            return False
        if K % (group_size * self.split_k):
            return False
        return not self.x_shared or group_size % (2 * self.bk) == 0

    def __str__(self) -> str:
        return (f"bm={self.bm} bk={self.bk} warps={self.num_warps} split_k={self.split_k}"
                f"{'' if self.x_shared else ' x_global'}")


def row_tiles(M: int) -> tuple[int, ...]:
    """Values of `bm` worth trying for M rows."""
    if M <= 16:
        return (16,)
    if M <= 32:
        return (16, 32)
    return (32, 64)


def candidates(M: int, N: int, K: int, group_size: int) -> list[Schedule]:
    """The schedules the tuner times for this problem (all fit it)."""
    found = []
    for bm in row_tiles(M):
        for bk in (32, 64):
            for warps in (2, 4):
                for split in (1, 2, 4, 8, 16):
                    if split > 1 and M > 64:
                        continue  # prefill has blocks enough
                    s = Schedule(bm, bk, warps, split)
                    if not s.fits(K, group_size):  # small groups: activations unstaged
                        s = Schedule(bm, bk, warps, split, x_shared=False)
                    if s.fits(K, group_size):
                        found.append(s)
    return found


def default_schedule(M: int, N: int, K: int, group_size: int,
                     sms: int = SMS_H100) -> Schedule:
    """A good schedule without timing anything (see the module docstring)."""
    # Measured on an H100 (bench/results): 64-row k-tiles when the group allows the
    # two-stage pipeline with them, 4 warps (128 columns) per block for wide layers.
    bm, warps = row_tiles(M)[0], 4 if N >= 8192 else 2
    bk = 64 if group_size % 128 == 0 else 32
    x_shared = group_size % (2 * bk) == 0
    blocks = -(-N // (32 * warps)) * -(-M // bm)
    split = 1
    while blocks * split < 4 * sms and split < 16 and \
            Schedule(bm, bk, warps, split * 2, x_shared).fits(K, group_size):
        split *= 2
    return Schedule(bm, bk, warps, split, x_shared)
