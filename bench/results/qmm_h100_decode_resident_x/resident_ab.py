"""Decode A/B: each tuning candidate of the streaming kernel against the same schedule
with the block's activations held whole in shared memory (`x_rows`: one copy and one
barrier before the main loop instead of a copy and two barriers per k-tile).

    python3 resident_ab.py OUT.jsonl SHAPES DTYPES MS [FLUSH]

One JSON row per (layer, type, M): `us` per schedule (its `str`), and `equal`: whether
each resident schedule's output is bitwise the plain one's.
"""

import json
import sys
from dataclasses import replace

import torch
from sweep import cells  # (this folder's script: the same cells)

from tilevm.bench.qmm import Timer
from tilevm.kernels.matmul import _launch
from tilevm.kernels.schedule import candidates, split_rows

SMEM_LIMIT = 64 << 10  # bytes of x a block may hold


def main() -> None:
    out, shapes, dtypes, ms = sys.argv[1:5]
    timer = Timer(min_reps=50, l2_flush=sys.argv[5] if len(sys.argv) > 5 else "write")
    with open(out, "a") as f:
        for shape, N, K, name, qw, M, x in cells(shapes, dtypes, ms):
            base = [s for s in candidates(M, N, K, 128, hopper=True) if s.x_shared]
            splits = sorted({s.split_k for s in base} | {16, 32})
            todo = list(base)
            for s in base + [replace(s, split_k=k) for s in base for k in splits]:
                r = replace(s, x_rows=split_rows(K, 128 * s.unroll, s.split_k))
                if r.fits(K, 128) and r.bm * r.x_rows * 2 <= SMEM_LIMIT \
                        and r not in todo:
                    todo.append(r)
            us, outs = {}, {}
            for s in todo:
                y = torch.empty(M, N, device="cuda", dtype=torch.float16)
                _launch(x, qw, y, s)
                torch.cuda.synchronize()
                outs[s] = y.clone()
                run = lambda s=s, y=y, x=x, qw=qw: _launch(x, qw, y, s)  # noqa: E731
                us[str(s)] = round(timer(run)[0] * 1e6, 2)
            equal = {str(s): bool(torch.equal(outs[s], outs[replace(s, x_rows=0)]))
                     for s in todo if s.x_rows and replace(s, x_rows=0) in outs}
            best = min(us, key=us.get)
            plain = min((k for k in us if "x_rows" not in k), key=us.get)
            row = {"shape": shape, "dtype": name, "M": M, "flush": timer.l2_flush,
                   "best": best, "best_plain": plain,
                   "ratio": round(us[best] / us[plain], 3), "us": us,
                   "equal": equal}
            print(json.dumps({k: row[k] for k in ("shape", "dtype", "M", "best",
                                                  "best_plain", "ratio")}),
                  "all equal" if all(equal.values()) else "MISMATCH", flush=True)
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
