"""K split in the wgmma kernel's wide tilings at 256 rows (session 36): the half-atom
256 x 128 tiling (even widths) and the 128 x 128 one with whole atoms, each with 128
partial sums a thread, against the tuner's candidates (which split only the 64 x 128
and 128 x 128 half-atom tilings).

    python3 wide_split_sweep.py OUT.jsonl SHAPES DTYPES MS
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "qmm_h100_decode_resident_x"))
from sweep import against_tuned  # noqa: E402  (session 27's)

from tilevm.kernels.schedule import wgmma  # noqa: E402


def wide_grid(M: int, bits: int) -> list:
    found = [wgmma(128, 4, 4, 128, lead=2, prefetch=2, split_k=split) for split in (2, 4)]
    if bits % 2 == 0:
        found += [wgmma(256, 8, 4, 128, lead=2, prefetch=2, half_atoms=True, split_k=split)
                  for split in (2, 4)]
    return found


def main() -> None:
    against_tuned(sys.argv[1:], wide_grid, "wide_split")


if __name__ == "__main__":
    main()
