"""Decode cells against their read floor: the streaming kernel's schedule grid (session
27's `sweep.py` grid) and the read floor of the cell's bytes, in one process.

    python3 floor_sweep.py OUT.jsonl SHAPES DTYPES MS FLUSH

Per (layer, type, M) and L2 flush ("write" or "read"): every schedule of the grid that
fits, timed by `bench.qmm.Timer` (median of >= 100 runs), cuBLAS f16, and
`bench.read_floor.read_floor_seconds` of the roofline's bytes. Every schedule's output
is compared with the first's (`close`: within 1e-2 of its largest value).
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "qmm_h100_decode_resident_x"))
from sweep import cells, time_grid  # noqa: E402  (session 27's grid and cells)

from tilevm.bench.qmm import Timer, traffic_bytes  # noqa: E402
from tilevm.bench.read_floor import read_floor_seconds  # noqa: E402
from tilevm.dtypes import parse  # noqa: E402


def main() -> None:
    out, shapes, dtypes, ms, flush = sys.argv[1:6]
    timer = Timer(min_reps=100, l2_flush=flush)
    with open(out, "a") as f:
        for shape, N, K, name, qw, M, x in cells(shapes, dtypes, ms):
            us, close = time_grid(timer, qw, x, N, K)
            wf = torch.randn(K, N, device="cuda", dtype=torch.float16)
            cublas = timer(lambda x=x, wf=wf: torch.matmul(x, wf))[0] * 1e6
            nbytes = int(traffic_bytes(M, N, K, parse(name).bits, 128))
            floor = read_floor_seconds(timer, nbytes)
            best = sorted(us, key=us.get)[:3]
            row = {"shape": shape, "dtype": name, "M": M, "flush": flush,
                   "floor_us": round(floor["seconds"] * 1e6, 2),
                   "floor_form": [floor["chunk"], floor["unroll"]],
                   "cublas_us": round(cublas, 2), "best": best,
                   "best_us": [us[b] for b in best], "us": us, "close": close}
            print(json.dumps({k: row[k] for k in ("shape", "dtype", "M", "flush", "floor_us",
                                                  "cublas_us", "best", "best_us")}),
                  "all close" if all(close.values()) else "MISMATCH", flush=True)
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
