"""Experiment (issue 46): level 2 (the PTX order) annealed on the attention example
(d=128, 128 x 64 tiles, 8 warps; S=2048, 16 heads) and on the quantized-matmul example
(int4, M=16, N=4096, K=4096); the winner and the compiled order then timed head to
head, alternating, 5 rounds of 100 launches. One JSON line per kernel."""
import json, statistics, sys, time
import numpy as np
from tilevm import dtypes
from tilevm.bench.examples import load_example
from tilevm.tune.order_search import search_order
from tilevm.tune.runner import Candidate, Runner

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 60
SEEDS = [int(x) for x in sys.argv[2].split(',')] if len(sys.argv) > 2 else [1]
att = load_example("attention"); qm = load_example("quantized_matmul")
rng = np.random.default_rng(0)
cases = []
settings = {"d": 128, "causal": False, "block_q": 128, "block_kv": 64, "num_warps": 8}
big, constants = att.example_inputs(rng, S=2048, BH=16, **dict(settings))
small, _ = att.example_inputs(rng, S=100, BH=2, **dict(settings))
cases.append(("attention d=128 S=2048 BH=16", att.attention.specialize(**constants), [big, small]))
qs = {"wdtype": dtypes.parse("int4")}
big, constants = qm.example_inputs(rng, M=16, N=4096, K=4096, **dict(qs))
small, _ = qm.example_inputs(rng, M=5, N=72, K=256, **dict(qs))
cases.append(("quantized_matmul int4 M=16 N=4096 K=4096", qm.quantized_matmul.specialize(**constants), [big, small]))
for (name, program, inputs), seed in [(c, s) for c in cases for s in SEEDS]:
    t0 = time.time()
    r = search_order(program, inputs, steps=STEPS, seed=seed, repeat=30, timeout_s=60, budget_s=200)
    search_s = time.time() - t0
    rounds = {"compiled": [], "best": []}
    with Runner(inputs[:1], repeat=100, timeout_s=60) as runner:
        for _ in range(5):
            rounds["compiled"].append(runner.run(Candidate(program)).seconds)
            rounds["best"].append(runner.run(Candidate(program, r.ptx)).seconds)
    print(json.dumps({"kernel": name, "seed": seed, "steps": len(r.annealing.trace), "ran": r.ran,
                      "repeated": r.repeated, "rejected": r.rejected,
                      "search_start_us": r.start_s * 1e6, "search_best_us": r.best_s * 1e6,
                      "accepted": sum(s.accepted for s in r.annealing.trace),
                      "head_to_head_us": {k: [round(v * 1e6, 2) for v in vs] for k, vs in rounds.items()},
                      "speedup_median": statistics.median(rounds["compiled"]) / statistics.median(rounds["best"]),
                      "search_s": round(search_s, 1)}), flush=True)
