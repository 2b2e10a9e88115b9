"""Offline: the model's predicted time for measured tuning candidates; per-problem
Spearman, best-of-predicted-top-third and predicted-best against the measured best.
argv: JSONL files (bench/results/cost_rank_*.jsonl format or exp_rank2's)."""
import json, sys, collections, time
from tilevm.kernels import schedule as sch
from tilevm.kernels import matmul as mm
from tilevm.cost import hardware
from tilevm.cost.model import Resources, estimate
from tilevm import dtypes

gpu = hardware.gpu("h100")
class QW: pass
qw = QW(); qw.dtype = dtypes.parse("int4"); qw.group_size = 128; qw.zeros = None
qw.scale_dtype = dtypes.parse("f16")

def rank(v):
    order = sorted(range(len(v)), key=lambda i: v[i]); r = [0] * len(v)
    for k, i in enumerate(order): r[i] = k
    return r

def spearman(a, b):
    n = len(a); ra, rb = rank(a), rank(b)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))

out = []
for f in sys.argv[1:]:
    rows = [json.loads(l) for l in open(f)]
    cands = {}
    for r in rows:
        N, K, M = r["N"], r["K"], r["M"]
        if (N, K, M) not in cands:
            cands[(N, K, M)] = {str(s): s for s in sch.candidates(M, N, K, 128, hopper=True, bits=4)}
        s = cands[(N, K, M)][r["schedule"]]
        progs = [mm._program(qw, s, N)]
        if s.dequant:
            progs.insert(0, mm._dequantizer_program(qw))
        res = r["kernels"] if "kernels" in r else [[p.block_threads, t[4], t[5]] for p, t in zip(progs, r["terms"])]
        pred = 0.0
        t0 = time.time()
        for p, (threads, regs, shared) in zip(progs, res):
            names = {q.name for q in p.params}
            e = estimate(p, {k: v for k, v in {"M": M, "N": N, "K": K}.items() if k in names},
                         gpu, Resources(threads, regs, shared))
            pred += e.predicted_s * 1e6
        out.append({**{k: r[k] for k in ("N", "K", "M", "schedule", "measured_us")},
                    "predicted_us": pred, "source": f, "analysis_s": time.time() - t0})
groups = collections.defaultdict(list)
for r in out:
    groups[(r["source"], r["N"], r["K"], r["M"])].append(r)
print(f"{'problem':36s} n  rho   top3  best")
res = []
for k, v in groups.items():
    m = [r["measured_us"] for r in v]; p = [r["predicted_us"] for r in v]
    best = min(m); order = sorted(range(len(v)), key=lambda i: p[i])
    third = order[:max(1, len(v) // 3)]
    x = (spearman(m, p), min(m[i] for i in third) / best, m[order[0]] / best, len(v))
    res.append(x)
    print(f"{k[0][-22:]:22s} {k[1]:5d} {k[2]:5d} {k[3]:4d} {len(v):2d} {x[0]:5.2f} {x[1]:5.3f} {x[2]:5.2f}")
for f in sys.argv[1:]:
    sub = [x for k, x in zip(groups, res) if k[0] == f]
    print(f, "mean rho %.2f" % (sum(x[0] for x in sub) / len(sub)),
          "top3<=1.03: %d/%d" % (sum(x[1] <= 1.03 for x in sub), len(sub)),
          "best<=1.10: %d/%d" % (sum(x[2] <= 1.10 for x in sub), len(sub)),
          "pooled rho %.2f" % spearman([r["measured_us"] for r in out if r["source"] == f],
                                       [r["predicted_us"] for r in out if r["source"] == f]),
          "max analysis %.1fs" % max(r["analysis_s"] for r in out if r["source"] == f))
json.dump(out, open("/tmp/rank_pred.json", "w"))
