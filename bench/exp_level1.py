"""Experiment (issue 46): level 1 (schedule knobs annealed) on the quantized matmul,
from the grid's best schedule, int4 g128 f16; winner and start then timed head to head
(5 alternating rounds of 50 launches). One JSON line per problem."""
import json, statistics, sys, time
import torch
from tilevm.kernels import quantize
from tilevm.kernels import matmul as mm
from tilevm.kernels.qmm_problem import QmmProblem
from tilevm.kernels.qmm_search import search_schedule
from tilevm.tune.runner import Candidate, Runner

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
BUDGET = float(sys.argv[2]) if len(sys.argv) > 2 else 45
PROBLEMS = [("8b.qkv", 12288, 4096, m) for m in (1, 16, 256, 4096)] + \
           [("70b.gate_up", 57344, 8192, 16), ("8b.down", 4096, 14336, 64)]
for name, N, K, M in PROBLEMS:
    t0 = time.time()
    qw = quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), "int4", 128, format="fragments")
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    best, report = mm.tune(x, qw)
    del qw, x; torch.cuda.empty_cache()
    if best.dequant:
        print(json.dumps({"layer": name, "M": M, "skipped": f"dequant schedule {best}"}), flush=True); continue
    t1 = time.time()
    r = search_schedule("int4", M, N, K, start=best, steps=STEPS, seed=1, hopper=True,
                        timeout_s=60, budget_s=BUDGET)
    t2 = time.time()
    problem = QmmProblem("int4", M, N, K, seed=1)
    rounds = {"grid": [], "found": []}
    with Runner([], repeat=50, timeout_s=60) as runner:
        for key, s in (("grid", best), ("found", r.best)):
            runner.add_inputs(key, problem.inputs(s)[:1])
        for _ in range(5):
            for key, s in (("grid", best), ("found", r.best)):
                rounds[key].append(runner.run(Candidate(problem.program(s), inputs=key)).seconds)
    print(json.dumps({"layer": name, "N": N, "K": K, "M": M, "grid": str(best), "found": str(r.best),
                      "grid_us": report["us"], "start_us": round(r.start_s * 1e6, 2),
                      "best_us": round(r.best_s * 1e6, 2), "steps": len(r.annealing.trace),
                      "ran": r.ran, "repeated": r.repeated, "rejected": r.rejected,
                      "head_to_head_us": {k: [round(v * 1e6, 2) for v in vs] for k, vs in rounds.items()},
                      "speedup_median": statistics.median(rounds["grid"]) / statistics.median(rounds["found"]),
                      "grid_s": round(t1 - t0, 1), "search_s": round(t2 - t1, 1)}), flush=True)
