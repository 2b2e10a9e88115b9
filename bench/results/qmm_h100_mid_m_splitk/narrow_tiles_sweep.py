"""Half-atom tilings of one warpgroup (64 columns a block) with K split, for the layers
with few column tiles between decode and prefill (session 36): 256 x 64 and 128 x 64 at
256 rows, 64 x 64 at 64 rows, each split 1, 2 and 4 ways, against the tuner's
candidates (even widths).

    python3 narrow_tiles_sweep.py OUT.jsonl SHAPES DTYPES MS
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "qmm_h100_decode_resident_x"))
from sweep import against_tuned  # noqa: E402  (session 27's)

from tilevm.kernels.schedule import wgmma  # noqa: E402


def narrow_grid(M: int, bits: int) -> list:
    rows = (64,) if M <= 64 else (256, 128)
    return [wgmma(bm, 4, 4, 128, lead=2, prefetch=2, half_atoms=True, split_k=split)
            for bm in rows for split in (1, 2, 4)] if bits % 2 == 0 else []


def main() -> None:
    against_tuned(sys.argv[1:], narrow_grid, "narrow")


if __name__ == "__main__":
    main()
