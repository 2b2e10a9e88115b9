"""Decode through the Hopper wgmma kernel (`kernels.qmm_wgmma`) against the tuner's
candidates (the swapped streaming kernel).

    python3 wgmma_sweep.py OUT.jsonl SHAPES DTYPES MS

Per (layer, type, M): the tuner's candidates, then a grid of wgmma tilings (bm = 8 or 16
rows of x, 4 or 8 warps, stages / lead, codes 1..4 k-tiles ahead, half atoms for even
widths), each timed with the write flush (median of >= 50 runs) and compared with the
first candidate's output (`close`: within 1e-2 of its largest value).
"""
import itertools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "qmm_h100_decode_resident_x"))
from sweep import against_tuned  # noqa: E402  (session 27's)

from tilevm.kernels.schedule import wgmma  # noqa: E402


def wgmma_grid(M: int, bits: int) -> list:
    bm = 8 if M <= 8 else 16
    found = []
    for warps, (stages, lead), prefetch, half in itertools.product(
            (4, 8), ((2, 1), (4, 2), (4, 3)), (2, 4), (False, True)):
        if half and bits % 2:
            continue
        found.append(wgmma(bm, warps, stages, 128, lead, prefetch, half_atoms=half))
    return found


def main() -> None:
    against_tuned(sys.argv[1:], wgmma_grid, "wgmma")


if __name__ == "__main__":
    main()
