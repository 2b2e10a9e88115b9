"""Experiment (issue 46): kernels.qmm_search.tune_problem (level 1, level 2, the final
checks) from the grid's best schedule (kernels.matmul.tune, L2 flushed), per cell; one
JSON line per cell. Args: wdtypes (comma), layers (comma of name), Ms (comma), budget_s."""
import json, sys, time
import torch
from tilevm.kernels import quantize
from tilevm.kernels import matmul as mm
from tilevm.kernels.qmm_search import tune_problem

LAYERS = {"8b.qkv": (12288, 4096), "70b.gate_up": (57344, 8192), "8b.down": (4096, 14336)}
wdtypes = sys.argv[1].split(","); layers = sys.argv[2].split(",")
Ms = [int(m) for m in sys.argv[3].split(",")]; budget = float(sys.argv[4])
seed = int(sys.argv[5]) if len(sys.argv) > 5 else 1
for wd in wdtypes:
    for layer in layers:
        N, K = LAYERS[layer]
        for M in Ms:
            t0 = time.time()
            qw = quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), wd, 128, format="fragments")
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            best, report = mm.tune(x, qw)
            del qw, x; torch.cuda.empty_cache()
            row = {"wdtype": wd, "layer": layer, "N": N, "K": K, "M": M, "seed": seed,
                   "grid": str(best), "grid_us": report["us"], "grid_s": round(time.time() - t0, 1)}
            if best.dequant:
                row["skipped"] = "the grid's best is the two-launch dequantize-then-multiply pair"
                print(json.dumps(row), flush=True); continue
            try:
                t = tune_problem(wd, M, N, K, start=best, hopper=True, seed=seed, budget_s=budget)
            except Exception as e:  # noqa
                row["error"] = f"{type(e).__name__}: {e}"[:2000]
                print(json.dumps(row), flush=True); continue
            row.update({"schedule": str(t.schedule), "ptx_moved": t.ptx is not None,
                        "times_us": {k: round(v * 1e6, 3) for k, v in t.times_s.items()},
                        "speedup": t.speedup, "spread": t.spread, "undone": t.undone,
                        "level1": {"found": str(t.level1.best), "ran": t.level1.ran, "repeated": t.level1.repeated,
                                   "rejected": t.level1.rejected, "steps": len(t.level1.annealing.trace),
                                   "trace": [s.accepted for s in t.level1.annealing.trace]},
                        "level2": {"ran": t.level2.ran, "repeated": t.level2.repeated, "rejected": t.level2.rejected,
                                   "steps": len(t.level2.annealing.trace)},
                        "samples": {"values": t.samples.samples, "sets": t.samples.input_sets,
                                    "failures": t.samples.failures} if t.samples else None,
                        "sanitizers": {s.tool: {"clean": s.clean, "status": s.status, "error": s.error,
                                                "report_tail": s.report[-600:]} for s in t.sanitizers},
                        "search_wall_s": round(t.wall_s, 1)})
            print(json.dumps(row), flush=True)
