"""Decode: every split of K from 1 to 16 (the tuner times 1, 2, 4, 8, 16 up to 8 rows and
1, 2, 4, 6, 8 at 16), 2 and 4 warps, swapped; with the tuner's candidates.

    python3 split_sweep.py OUT.jsonl SHAPES DTYPES MS

Session 27's `time_grid` (write flush, median of >= 50 runs), two passes, the better of
each; outputs compared with the first schedule's.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "qmm_h100_decode_resident_x"))
from sweep import cells, time_grid  # noqa: E402

from tilevm.bench.qmm import Timer  # noqa: E402
from tilevm.kernels.schedule import Schedule, candidates  # noqa: E402


def main():
    out, shapes, dts, ms = sys.argv[1:5]
    timer = Timer(min_reps=50)
    with open(out, "a") as f:
        for shape, N, K, name, qw, M, x in cells(shapes, dts, ms):
            bm = 8 if M <= 8 else 16
            base = [s for s in candidates(M, N, K, 128, hopper=True) if s.fits(K, 128)]
            extra = [Schedule(bm, 64, w, s, swap_ab=True) for w in (2, 4)
                     for s in range(1, 17)]
            extra = [s for s in extra if s.fits(K, 128) and s not in base]
            us, close = time_grid(timer, qw, x, N, K, base + extra)
            us2, _ = time_grid(timer, qw, x, N, K, base + extra)
            us = {k: min(v, us2[k]) for k, v in us.items()}
            b = min((str(s) for s in base), key=us.get)
            e = min((str(s) for s in extra), key=us.get)
            print(shape, name, M, "tuner's", b, us[b], "other", e, us[e],
                  round(us[e] / us[b], 3), "all close" if all(close.values()) else "MISMATCH",
                  flush=True)
            f.write(json.dumps({"shape": shape, "dtype": name, "M": M, "us": us,
                                "close": close}) + "\n")


if __name__ == "__main__":
    main()
