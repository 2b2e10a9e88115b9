"""Experiment (issue 46): level 2 (PTX order) on the quantized-matmul library kernels,
from the grid's best schedule (the exhaustive tuner's pick), int4 g128 f16; the winner
and the compiled order then timed head to head (5 alternating rounds of 50 launches,
warm L2: run_on_gpu times the same inputs). One JSON line per problem."""
import json, statistics, sys, time
import torch
from tilevm.kernels import quantize
from tilevm.kernels import matmul as mm
from tilevm.kernels.qmm_problem import qmm_problem
from tilevm.tune.order_search import search_order
from tilevm.tune.runner import Candidate, Runner

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 100
BUDGET = float(sys.argv[2]) if len(sys.argv) > 2 else 60
PROBLEMS = [("8b.qkv", 12288, 4096, m) for m in (1, 16, 256, 4096)] + \
           [("70b.gate_up", 57344, 8192, m) for m in (1, 16)] + [("8b.down", 4096, 14336, m) for m in (1, 64)]
for name, N, K, M in PROBLEMS:
    t0 = time.time()
    qw = quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), "int4", 128, format="fragments")
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    best, report = mm.tune(x, qw)
    del qw, x; torch.cuda.empty_cache()
    if best.dequant:
        print(json.dumps({"layer": name, "M": M, "skipped": f"dequant schedule {best}"}), flush=True); continue
    program, inputs = qmm_problem(best, "int4", M, N, K)
    r = search_order(program, inputs, steps=STEPS, seed=1, repeat=20, timeout_s=60, budget_s=BUDGET)
    rounds = {"compiled": [], "best": []}
    with Runner(inputs[:1], repeat=50, timeout_s=60) as runner:
        for _ in range(5):
            rounds["compiled"].append(runner.run(Candidate(program)).seconds)
            rounds["best"].append(runner.run(Candidate(program, r.ptx)).seconds)
    print(json.dumps({"layer": name, "N": N, "K": K, "M": M, "schedule": str(best),
                      "grid_us": report["us"], "steps": len(r.annealing.trace), "ran": r.ran,
                      "repeated": r.repeated, "rejected": r.rejected,
                      "head_to_head_us": {k: [round(v * 1e6, 2) for v in vs] for k, vs in rounds.items()},
                      "speedup_median": statistics.median(rounds["compiled"]) / statistics.median(rounds["best"]),
                      "wall_s": round(time.time() - t0, 1)}), flush=True)
