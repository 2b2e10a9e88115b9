"""tune_check.py OUT: does the tuner pick the fastest decode schedule? For three (type,
layer, M = 1) problems: every candidate timed with the bench Timer (write flush, 50 runs),
then three independent `tune()` picks. One JSON row per problem (tune_check.jsonl)."""
import json
import sys

import torch

from tilevm.bench.qmm import SHAPES, Timer
from tilevm.kernels import matmul
from tilevm.kernels.schedule import candidates
from tilevm.kernels.weights import quantize

timer = Timer(min_reps=50)
with open(sys.argv[1], "a") as out:
    for wd, shape, M in (("int3", "70b.gate_up", 1), ("int4", "8b.qkv", 1),
                         ("f6e3m2", "8b.qkv", 1)):
        N, K = SHAPES[shape]
        torch.manual_seed(0)
        w = torch.randn(K, N, device="cuda", dtype=torch.float16)
        qw = quantize(w, wd, 128, format="fragments")
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        y = torch.empty(M, N, device="cuda", dtype=torch.float16)
        times = {}
        for s in candidates(M, N, K, 128, hopper=True):
            matmul._launch(x, qw, y, s)
            torch.cuda.synchronize()
            us = timer(lambda s=s, qw=qw, x=x, y=y: matmul._launch(x, qw, y, s))[0]
            times[str(s)] = round(us * 1e6, 2)
        picks = []
        for _ in range(3):
            best, report = matmul.tune(x, qw)
            picks.append((str(best), report["us"]))
        row = {"dtype": wd, "shape": shape, "M": M, "timer_us": times, "tune_picks": picks}
        print(json.dumps(row), flush=True)
        out.write(json.dumps(row) + "\n")
