# usage: intercept.py OUT.jsonl -> M=1 decode time against weight bytes (N=12288, K swept;
# K=4096, N swept), tuned tilevm (int4, int2) and cuBLAS f16, read flush: the fixed cost per call
# vs the per-byte cost
import json
import sys
import time

import torch

from tilevm.bench.qmm import Timer
from tilevm.kernels.matmul import quantized_matmul, tuned_schedule
from tilevm.kernels.schedule import Schedule
from tilevm.kernels.weights import quantize

timer = Timer(min_reps=60, l2_flush="read")
f = open(sys.argv[1], "a")
small = torch.empty(256, device="cuda")
rec = dict(floor_zero=round(timer(lambda: small.zero_())[0] * 1e6, 2))
print(json.dumps(rec), flush=True)
f.write(json.dumps(rec) + "\n")
shapes = [(12288, k) for k in (1024, 2048, 4096, 8192, 16384)] + [(n, 4096) for n in (3072, 24576)]
t0 = time.time()
for N, K in shapes:
    torch.manual_seed(0)
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    x = torch.randn(1, K, device="cuda", dtype=torch.float16)
    rec = dict(N=N, K=K, cublas=round(timer(lambda x=x, w=w: x @ w)[0] * 1e6, 2))
    for wd in ("int4", "int2"):
        qw = quantize(w, wd, 128, format="fragments")
        y = quantized_matmul(x, qw, tune=True)
        torch.cuda.synchronize()
        rec[wd] = round(timer(lambda x=x, qw=qw: quantized_matmul(x, qw, tune=True))[0] * 1e6, 2)
        rec[wd + "_default"] = round(
            timer(lambda x=x, qw=qw: quantized_matmul(x, qw, tune=False))[0] * 1e6, 2)
        rec[wd + "_sched"] = str(tuned_schedule(x, qw))
        if wd == "int4":
            for sk in (1, 4):
                s = Schedule(8, 64, 4, sk, swap_ab=True)
                if s.fits(K, 128):
                    rec[f"int4_w4_s{sk}"] = round(
                        timer(lambda x=x, qw=qw, s=s: quantized_matmul(x, qw, schedule=s))[0] * 1e6,
                        2)
        hot = []
        for _ in range(50):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(2_000_000)
            a.record()
            quantized_matmul(x, qw, tune=True)
            b.record()
            b.synchronize()
            hot.append(a.elapsed_time(b) * 1e3)
        rec[wd + "_hot"] = round(sorted(hot)[25], 2)
    print(json.dumps(rec), round(time.time() - t0), flush=True)
    f.write(json.dumps(rec) + "\n")
