"""Decode split-K: partial sums of y's rows only (`kernels.qmm` with `splitk_rows.patch`
applied) against the whole tile of bm rows in register order (`old_qmm.py`: save
`git show eff8dd4:kernels/qmm.py` there).

    python3 rows_ab.py OUT.jsonl CELLS

CELLS: `shape:dtype:M,...`. Per cell, every tuning candidate with split_k > 1 (f16,
group 128), both kernels: outputs compared bitwise, then timed (write flush, median of
>= 50 runs) in three alternating rounds; the best round of each.
"""
import json
import os
import sys
from dataclasses import replace

import torch

sys.path.insert(0, os.path.dirname(__file__))
import old_qmm  # noqa: E402

from tilevm.backend import launch  # noqa: E402
from tilevm.bench.qmm import SHAPES, Timer  # noqa: E402
from tilevm.dtypes import parse  # noqa: E402
from tilevm.kernels.qmm import qmm_kernel, splitk_sizes  # noqa: E402
from tilevm.kernels.schedule import candidates  # noqa: E402
from tilevm.kernels.weights import quantize  # noqa: E402


def runner(kernel, suffix, x, qw, s):
    M, K = x.shape
    N = qw.shape[1]
    program = kernel("f16").specialize(wdtype=qw.dtype, group_size=128, has_zeros=False,
                                       **s.constants())
    kern = launch.compiled_kernel(replace(program, name=program.name + suffix))
    floats = max(splitk_sizes(M, N, s.bm, s.num_warps, s.split_k)[0],
                 old_qmm.splitk_sizes(M, N, s.bm, s.num_warps, s.split_k)[0])
    tiles = splitk_sizes(M, N, s.bm, s.num_warps, s.split_k)[1]
    ws = torch.empty(floats, device="cuda", dtype=torch.float32)
    counters = torch.zeros(tiles, device="cuda", dtype=torch.int32)
    y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    return y, lambda: kern(x, qw.packed, qw.scales, qw.scales, y, ws, counters, M, N, K)


def main():
    out, cells = sys.argv[1:3]
    timer = Timer(min_reps=50)
    with open(out, "a") as f:
        for cell in cells.split(","):
            shape, name, M = cell.split(":")
            M = int(M)
            N, K = SHAPES[shape]
            torch.manual_seed(0)
            w = torch.randn(K, N, device="cuda", dtype=torch.float16)
            qw = quantize(w, parse(name), 128, format="fragments")
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            for s in candidates(M, N, K, 128, hopper=True):
                if s.split_k == 1 or not s.fits(K, 128):
                    continue
                runs, ys = {}, {}
                for label, kernel, suffix in (("tile", old_qmm.qmm_kernel, "_old"),
                                              ("rows", qmm_kernel, "")):
                    ys[label], runs[label] = runner(kernel, suffix, x, qw, s)
                    runs[label]()
                torch.cuda.synchronize()
                same = bool(torch.equal(ys["tile"], ys["rows"]))
                us = {k: [] for k in runs}
                for _ in range(3):
                    for k, run in runs.items():
                        us[k].append(timer(run)[0] * 1e6)
                best = {k: round(min(v), 2) for k, v in us.items()}
                row = {"shape": shape, "dtype": name, "M": M, "schedule": str(s),
                       "us": best, "ratio": round(best["rows"] / best["tile"], 3),
                       "bitwise_equal": same}
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
