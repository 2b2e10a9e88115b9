"""Experiment (issue 45): the tuner with the cost model's ranking (times the predicted
fastest third) against the tuner timing every candidate, on the benchmark shapes; the
two winners then timed head to head (interleaved, L2 flushed, events behind a sleep).
One JSON line per problem. argv: first and last problem index."""
import json
import statistics
import sys
import time

import torch

from tilevm.kernels import matmul as mm
from tilevm.kernels import quantize

LAYERS = [("8b.qkv", 12288, 4096), ("8b.o", 4096, 4096), ("8b.gate_up", 28672, 4096),
          ("8b.down", 4096, 14336), ("70b.qkv", 10240, 8192), ("70b.o", 8192, 8192),
          ("70b.gate_up", 57344, 8192), ("70b.down", 8192, 28672)]
MS = [1, 16, 64, 256, 4096]
# the middle rows first (the earlier misses)
PROBLEMS = [(name, N, K, M) for M in (64, 256, 1, 16, 4096) for name, N, K in LAYERS]
lo, hi = (int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2 else (0, len(PROBLEMS))
deadline = time.time() + (float(sys.argv[3]) if len(sys.argv) > 3 else 1e9)
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
stream = torch.cuda.current_stream().cuda_stream


def head_to_head(x, qw, y, schedules, rounds=60):
    plans = [mm._plan(x, qw, y, s, stream, tuple(y.shape)) for s in schedules]
    times = [[] for _ in plans]
    for r in range(rounds):
        for i, plan in enumerate(plans):
            flush.zero_()
            torch.cuda._sleep(int(2e9 * 100e-6))
            b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            b.record()
            mm._run(plan, x.data_ptr(), stream, y)
            e.record()
            e.synchronize()
            if r >= 5:
                times[i].append(b.elapsed_time(e) * 1e3)
    return [statistics.median(t) for t in times]


current = None
for name, N, K, M in PROBLEMS[lo:hi]:
    if time.time() > deadline:
        print(json.dumps({"stopped_before": [name, M]}), flush=True)
        break
    if current != (N, K):
        qw = None  # (problems in M order: one quantize a problem)
        torch.cuda.empty_cache()
        qw = quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), "int4", 128,
                      format="fragments")
        current = (N, K)
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    t0 = time.time()
    full, full_report = mm.tune(x, qw, ranked=False)
    t_full = time.time() - t0
    t0 = time.time()
    ranked, ranked_report = mm.tune(x, qw, ranked=True)
    t_ranked = time.time() - t0
    if ranked == full:
        us = [full_report["us"]] * 2
    else:
        us = head_to_head(x, qw, y, [full, ranked])
    print(json.dumps({"layer": name, "N": N, "K": K, "M": M, "exhaustive": str(full),
                      "ranked": str(ranked), "exhaustive_us": us[0], "ranked_us": us[1],
                      "ratio": us[1] / us[0], "exhaustive_report": full_report,
                      "ranked_report": ranked_report, "exhaustive_wall_s": t_full,
                      "ranked_wall_s": t_ranked}), flush=True)
    del x, y
