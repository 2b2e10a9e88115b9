"""Decode with two or four atoms (64 or 128 columns) a warp against the tuner's candidates.

    python3 atoms_ab.py OUT.jsonl SHAPES DTYPES MS

Per (layer, type, M): the tuner's candidates (`schedule.candidates`, Hopper) and the
swapped streaming kernel with `warp_atoms` 2 (1, 2 or 4 warps) and 4 (1 or 2 warps) at
each of the candidates' splits, timed with the write flush (median of >= 50 runs; every
output within 1e-2 of the first's, `close`); then the best of each set timed again in
three alternating rounds (`final_us`: the best round of each).
"""

import json
import os
import sys
from dataclasses import replace

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "qmm_h100_decode_resident_x"))
from sweep import cells, time_grid  # noqa: E402  (session 27's cells and timing loop)

from tilevm.bench.qmm import Timer  # noqa: E402
from tilevm.kernels.matmul import _launch  # noqa: E402
from tilevm.kernels.schedule import candidates  # noqa: E402


def atom_variants(tuned) -> list:
    swapped = [s for s in tuned if s.swap_ab and s.unroll == 1]
    splits = sorted({s.split_k for s in swapped})
    base = swapped[0]
    found = [replace(base, num_warps=w, split_k=k, warp_atoms=2)
             for w in (1, 2, 4) for k in splits]
    found += [replace(base, num_warps=w, split_k=k, warp_atoms=4) for w in (1, 2)
              for k in splits]
    return found


def main() -> None:
    out, shapes, dtypes, ms = sys.argv[1:5]
    timer = Timer(min_reps=50)
    with open(out, "a") as f:
        for shape, N, K, name, qw, M, x in cells(shapes, dtypes, ms):
            tuned = candidates(M, N, K, 128, hopper=True)
            atoms = atom_variants(tuned)
            us, close = time_grid(timer, qw, x, N, K, tuned + atoms)
            best_tuned = min((str(s) for s in tuned if str(s) in us), key=us.get)
            best_atoms = min((str(s) for s in atoms if str(s) in us), key=us.get)
            by_name = {str(s): s for s in tuned + atoms}
            final = {best_tuned: [], best_atoms: []}
            for _ in range(3):
                for label in final:
                    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
                    run = lambda s=by_name[label], y=y, x=x, qw=qw: _launch(x, qw, y, s)  # noqa: E731
                    final[label].append(timer(run)[0] * 1e6)
            final_us = {k: round(min(v), 2) for k, v in final.items()}
            row = {"shape": shape, "dtype": name, "M": M, "best_tuned": best_tuned,
                   "best_atoms": best_atoms, "final_us": final_us,
                   "ratio": round(final_us[best_atoms] / final_us[best_tuned], 3),
                   "us": us, "close": close}
            print(json.dumps({k: row[k] for k in ("shape", "dtype", "M", "best_tuned",
                                                  "best_atoms", "final_us", "ratio")}),
                  "all close" if all(close.values()) else "MISMATCH", flush=True)
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
