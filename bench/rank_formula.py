"""Offline: variants of the time formula over the dumped features; per-dataset Spearman
within problems, top-third and predicted best against the measured best."""
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
U, L = 0.5, 5e-6

def rank(v):
    order = sorted(range(len(v)), key=lambda i: (v[i], i)); r = [0] * len(v)
    for k, i in enumerate(order): r[i] = k
    return r

def spearman(a, b):
    n = len(a)
    if n < 3: return float("nan")
    ra, rb = rank(a), rank(b)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))

def kernel_time(k, variant, u=U):
    s = k["seconds"]; q = k["waves"] / (k["blocks"] / k["slots"]) if k["slots"] else 1
    comp = [s["tensor_core"], s["fma"], s["convert"]]
    if variant == 0:
        c = max(comp)
    elif variant == 1:
        c = max(comp) + u * (sum(comp) - max(comp))
    else:
        c = sum(comp)
    c *= q; m = s["dram"]
    return max(m, c) + u * min(m, c) + k["waves"] * L

def evaluate(variant, u=U, verbose=False):
    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r["source"].split("/")[-1], r["N"], r["K"], r["M"])].append(r)
    res = collections.defaultdict(list)
    for key, v in groups.items():
        m = [r["measured_us"] for r in v]; p = [sum(kernel_time(k, variant, u) for k in r["kernels"]) for r in v]
        best = min(m); order = sorted(range(len(v)), key=lambda i: (p[i], i))
        third = order[:max(1, len(v) // 3)]
        x = (spearman(m, p), min(m[i] for i in third) / best, m[order[0]] / best)
        res[key[0]].append(x)
        if verbose: print("   ", key, "rho %.2f top3 %.3f best %.2f" % x)
    for src, xs in res.items():
        rhos = [x[0] for x in xs if x[0] == x[0]]
        print(f"  v{variant} u={u} {src:28s} rho {sum(rhos)/len(rhos):.2f} (n={len(rhos)}) top3<=1.03 {sum(x[1] <= 1.03 for x in xs)}/{len(xs)} best<=1.10 {sum(x[2] <= 1.10 for x in xs)}/{len(xs)} worst top3 {max(x[1] for x in xs):.3f}")

for variant in (0, 1, 2):
    evaluate(variant)
for u in (0.25, 0.75, 1.0):
    evaluate(1, u)
if len(sys.argv) > 2:
    evaluate(int(sys.argv[2]), verbose=True)
