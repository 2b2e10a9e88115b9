"""Decode through the Hopper wgmma kernel (`kernels.qmm_wgmma`) against the tuner's
candidates (the swapped streaming kernel).

    python3 wgmma_sweep.py OUT.jsonl SHAPES DTYPES MS

Per (layer, type, M): the tuner's candidates, then a grid of wgmma tilings (bm = 8 or 16
rows of x, 4 or 8 warps, stages / lead, codes 1..4 k-tiles ahead, half atoms for even
widths), each timed with the write flush (median of >= 50 runs) and compared with the
first candidate's output (`close`: within 1e-2 of its largest value).
"""
import itertools
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "qmm_h100_decode_resident_x"))
from sweep import cells, time_grid  # noqa: E402  (session 27's)

from tilevm.bench.qmm import Timer  # noqa: E402
from tilevm.dtypes import parse  # noqa: E402
from tilevm.kernels.schedule import candidates, wgmma  # noqa: E402


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
    out, shapes, dtypes, ms = sys.argv[1:5]
    timer = Timer(min_reps=50)
    with open(out, "a") as f:
        for shape, N, K, name, qw, M, x in cells(shapes, dtypes, ms):
            base = candidates(M, N, K, 128, hopper=True, bits=parse(name).bits)
            grid = wgmma_grid(M, parse(name).bits)
            us, close = time_grid(timer, qw, x, N, K, base + grid)
            kinds = {"tuned": [str(s) for s in base], "wgmma": [str(s) for s in grid]}
            best = {k: min((s for s in v if s in us), key=us.get) for k, v in kinds.items()}
            row = {"shape": shape, "dtype": name, "M": M, "best": best,
                   "best_us": {k: us[s] for k, s in best.items()},
                   "ratio": round(us[best["wgmma"]] / us[best["tuned"]], 3),
                   "us": us, "close": close}
            print(json.dumps({k: row[k] for k in ("shape", "dtype", "M", "best", "best_us",
                                                  "ratio")}),
                  "all close" if all(close.values()) else
                  f"MISMATCH {[s for s, c in close.items() if not c]}", flush=True)
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
