"""Experiment (issue 45), offline: does an L2-bandwidth term (the issued global bytes
over an L2 bandwidth, as another memory term beside DRAM's) improve the ranking of
bench/results/cost_splitk_offline_f1cd492.jsonl (the 168 out-of-sample candidates)?
Prints the mean per-problem Spearman and the predicted-best-within-10% count."""
import collections
import json
import sys


def rank(v):
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0] * len(v)
    for k, i in enumerate(order):
        r[i] = k
    return r


def spearman(a, b):
    n = len(a)
    ra, rb = rank(a), rank(b)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))


def overlapped(xs, f=0.5):
    xs = sorted(xs, reverse=True)
    return xs[0] + f * sum(xs[1:])


rows = [json.loads(line) for line in open(sys.argv[1])]
for bw in (None, 2e12, 3e12, 4e12, 5.5e12, 7e12):
    groups = collections.defaultdict(list)
    for r in rows:
        l2 = sum(t["issued_read"] + t["issued_written"] for t in r["tensors"].values())
        sec, w = r["seconds"], r["waves"]
        compute = overlapped([sec["tensor_core"], sec["fma"], sec["convert"]])
        ideal = r["blocks"] / w["slots"] if w["slots"] else 0
        quantization = w["waves"] / ideal if ideal else 1
        memory = sec["dram"] if bw is None else max(sec["dram"], l2 / bw)
        predicted = overlapped([memory, compute * quantization]) + w["waves"] * 5e-6
        groups[(r["N"], r["K"], r["M"])].append((r["measured_us"], predicted))
    rhos, best = [], 0
    for v in groups.values():
        m, p = [a for a, _ in v], [b for _, b in v]
        rhos.append(spearman(m, p))
        best += m[min(range(len(v)), key=lambda i: p[i])] <= 1.10 * min(m)
    print(bw, round(sum(rhos) / len(rhos), 3), f"{best}/{len(groups)}")
