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
    bk: int = 64
    num_warps: int = 1
    split_k: int = 1
    x_shared: bool = True

    def constants(self) -> dict[str, int | bool]:
        """The kernel's compile-time constants for this schedule."""
        return asdict(self)

    def fits(self, K: int, group_size: int) -> bool:
        """Whether the kernel's requirements hold for this K and group size."""
        if self.bk % 32 or group_size % self.bk or K % 32:
            return False
        if K % (group_size * self.split_k):
            return False
        return not self.x_shared or K % (2 * self.bk * self.split_k) == 0

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
        for bk in (64, 128):
            for warps in (1, 2, 4):
                for split in (1, 2, 4, 8):
                    s = Schedule(bm, bk, warps, split)
                    if s.fits(K, group_size) and (split == 1 or M <= 64):
                        found.append(s)
    if not found:  # small groups (g = 32) or odd K: the plainest schedule that fits
        found = [s for s in (Schedule(row_tiles(M)[0], 32, 1, 1, x) for x in (True, False))
                 if s.fits(K, group_size)]
    return found


def default_schedule(M: int, N: int, K: int, group_size: int,
                     sms: int = SMS_H100) -> Schedule:
    """A good schedule without timing anything (see the module docstring)."""
    bm = row_tiles(M)[0]
    bk = 64 if group_size % 64 == 0 else 32
    blocks = -(-N // 32) * -(-M // bm)
    split = 1
    while blocks * split < 8 * sms and split < 8:
        trial = Schedule(bm, bk, 1, split * 2)
        if not trial.fits(K, group_size):
            break
        split *= 2
    schedule = Schedule(bm, bk, 1, split)
    if not schedule.fits(K, group_size):
        schedule = Schedule(bm, bk, 1, split, x_shared=False)
    if not schedule.fits(K, group_size):
        schedule = Schedule(bm, 32, 1, 1, x_shared=False)
    return schedule
