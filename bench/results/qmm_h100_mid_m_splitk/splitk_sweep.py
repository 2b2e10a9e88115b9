"""The register-A wgmma kernel with K split (`split_k`) at 64 and 256 rows, against the
tuner's candidates of the commit before it (which had no wgmma tiling up to 64 rows and
no split-K one at all).

    python3 splitk_sweep.py OUT.jsonl SHAPES DTYPES MS

Per (layer, type, M): the tuner's candidates, then the split-K grid below, each timed
with the write flush (median of >= 50 runs) and compared with the first candidate's
output (`close`: within 1e-2 of its largest value).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "qmm_h100_decode_resident_x"))
from sweep import against_tuned  # noqa: E402  (session 27's)

from tilevm.kernels.schedule import candidates, wgmma  # noqa: E402


def splitk_grid(M: int, bits: int) -> list:
    tiles = [(64, 4, False)] + ([(64, 8, True), (128, 8, True)] if bits % 2 == 0 else [])
    if M <= 64:
        tiles = [t for t in tiles if t[0] == 64]
    return [wgmma(bm, warps, 4, 128, lead=2, prefetch=2, half_atoms=half, split_k=split)
            for bm, warps, half in tiles for split in (1, 2, 4, 8)]


def main() -> None:
    against_tuned(sys.argv[1:], splitk_grid, "splitk", lambda M, N, K, bits: [
        s for s in candidates(M, N, K, 128, hopper=True, bits=bits)
        if s.split_k == 1 or not s.wgmma])


if __name__ == "__main__":
    main()
