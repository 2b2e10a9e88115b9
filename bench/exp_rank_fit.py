"""Experiment (issue 45): sweep the prediction's constants (resident warps that saturate
DRAM, the unoverlapped fraction of memory and compute, a latency per wave) over the 204
measured candidates, recomputed by exp_rank_offline.py: Spearman per problem, the
predicted best and the best of the predicted top third against the measured best.

    python rank_fit.py RECOMPUTED.jsonl
"""
import collections, json, sys

rows = [json.loads(line) for line in open(sys.argv[1])]


def rank(v):
    order = sorted(range(len(v)), key=lambda i: v[i]); r = [0] * len(v)
    for k, i in enumerate(order):
        r[i] = k
    return r


def spearman(a, b):
    n = len(a); ra, rb = rank(a), rank(b)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))


def predict(r, warps, fraction, latency):
    t = 0
    for k in r["kernels"]:
        resident = min(k["blocks"], k["slots"]) * k["warps"] / 132
        eff = min(1, resident / warps) if warps else 1
        q = k["waves"] / (k["blocks"] / k["slots"])
        m = k["dram_s"] / eff
        c = max(k["tc_s"], k["fma_s"], k["convert_s"]) * q
        t += max(m, c) + fraction * min(m, c) + latency * k["waves"]
    return t


problems = collections.defaultdict(list)
for r in rows:
    problems[(r["N"], r["K"], r["M"])].append(r)
for warps in (0, 6, 8, 12):
    for fraction in (0.0, 0.25, 0.5, 1.0):
        for latency in (0.0, 3e-6, 5e-6, 8e-6, 12e-6):
            res = []
            for v in problems.values():
                m = [r["measured_us"] for r in v]; p = [predict(r, warps, fraction, latency) for r in v]
                order = sorted(range(len(v)), key=lambda i: p[i])
                res.append((spearman(m, p), min(m[i] for i in order[:max(1, len(v) // 3)]) / min(m),
                            m[order[0]] / min(m)))
            print(warps, fraction, latency, "rho %.2f" % (sum(x[0] for x in res) / len(res)),
                  "top3<=3%%: %d" % sum(x[1] <= 1.03 for x in res),
                  "best<=10%%: %d" % sum(x[2] <= 1.10 for x in res))
