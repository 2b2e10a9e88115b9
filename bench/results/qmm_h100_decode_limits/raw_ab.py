"""Decode upper bound (apply experiment.patch first; timing only): integer codes cast
without the float op (TILEVM_EXP_RAW=1: the codes' f16 subnormal patterns, wrong
values), alone and with the extra dot of a ones tile (`exp_bias=1`) that would sum x
per group for the codes' offset.

    python3 raw_ab.py OUT.jsonl SHAPES DTYPES MS

Per cell: every tuning candidate timed once (write flush, >= 50 runs); its two fastest
built as base, raw and raw+sx, timed in three alternating rounds (the best round each).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from kinds_ab import cells  # noqa: E402
from kinds_ab import runner as build_runner

from tilevm.bench.qmm import Timer  # noqa: E402
from tilevm.kernels.schedule import candidates  # noqa: E402


def runner(x, qw, s, raw, eb):
    return build_runner(x, qw, s, raw, {"exp_bias": eb} if s.swap_ab and eb else {})


def main():
    out, shapes, dts, ms = sys.argv[1:5]
    timer = Timer(min_reps=50)
    with open(out, "a") as f:
        for shape, N, K, name, qw, M, x in cells(shapes, dts, ms):
            cands = [s for s in candidates(M, N, K, 128, hopper=True) if s.fits(K, 128)]
            us = {}
            runs = {}
            for s in cands:
                r = runner(x, qw, s, 0, 0)
                us[str(s)] = timer(r)[0] * 1e6
                runs[str(s)] = (s, r)
            best = sorted(us, key=us.get)[:2]
            final = {}
            for label in best:
                s = runs[label][0]
                final[f"base {label}"] = runs[label][1]
                final[f"raw {label}"] = runner(x, qw, s, 1, 0)
                final[f"raw+sx {label}"] = runner(x, qw, s, 1, 1)
            res = {k: [] for k in final}
            for _ in range(3):
                for k, r in final.items():
                    res[k].append(timer(r)[0] * 1e6)
            best_us = {k: round(min(v), 2) for k, v in res.items()}
            kinds = {}
            for kind in ("base", "raw", "raw+sx"):
                kinds[kind] = min(v for k, v in best_us.items() if k.split()[0] == kind)
            row = {"shape": shape, "dtype": name, "M": M, "best": kinds,
                   "raw/base": round(kinds["raw"] / kinds["base"], 3),
                   "raw+sx/base": round(kinds["raw+sx"] / kinds["base"], 3),
                   "us": best_us, "cands": {k: round(v, 2) for k, v in us.items()}}
            print(json.dumps({k: row[k] for k in ("shape", "dtype", "M", "best",
                                                  "raw/base", "raw+sx/base")}), flush=True)
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
