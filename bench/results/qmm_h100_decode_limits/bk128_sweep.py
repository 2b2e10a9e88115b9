"""Decode: k-tiles of 128 rows (4 atoms along K a warp, twice the bytes in flight a
warp) and the deeper pipeline with 4 warps, against the tuner's candidates (session
27's `time_grid`, write flush, two passes, the better of each).

    python3 bk128_sweep.py OUT.jsonl SHAPES DTYPES MS
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "qmm_h100_decode_resident_x"))
from sweep import cells, time_grid  # noqa: E402

from tilevm.bench.qmm import Timer  # noqa: E402
from tilevm.kernels.schedule import Schedule, candidates  # noqa: E402

out, shapes, dts, ms = sys.argv[1:5]
timer = Timer(min_reps=50)
with open(out, "a") as f:
    for shape, N, K, name, qw, M, x in cells(shapes, dts, ms):
        bm = 8 if M <= 8 else 16
        extra = [Schedule(bm, 128, w, s, unroll=2, swap_ab=True)
                 for w in (2, 4, 8) for s in (1, 2, 4, 8)]
        extra += [Schedule(bm, 64, w, s, prefetch=3, unroll=2, swap_ab=True)
                  for w in (4,) for s in (2, 4, 8)]
        base = [s for s in candidates(M, N, K, 128, hopper=True) if s.fits(K, 128)]
        us, close = time_grid(timer, qw, x, N, K, base + extra)
        us2, _ = time_grid(timer, qw, x, N, K, base + extra)
        us = {k: min(v, us2[k]) for k, v in us.items()}
        b = min((str(s) for s in base), key=us.get)
        e = min((str(s) for s in extra), key=us.get)
        print(shape, name, M, "base", b, us[b], "extra", e, us[e], round(us[e] / us[b], 3),
              "all close" if all(close.values()) else "MISMATCH", flush=True)
        f.write(json.dumps({"shape": shape, "dtype": name, "M": M, "us": us,
                            "close": close}) + "\n")
