# (reads /tmp/rank_mid.json: bench/results/cost_rank_mid_offline_52721b4.json, the output of exp_rank_mid_offline.py)
import json, collections, sys
from tilevm.kernels.schedule import candidates
rows = json.load(open('/tmp/rank_mid.json'))
def rank(v):
    order = sorted(range(len(v)), key=lambda i: v[i]); out = [0] * len(v)
    for k, i in enumerate(order): out[i] = k
    return out
def spearman(a, b):
    n = len(a); ra, rb = rank(a), rank(b)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))
cand = {}
def evaluate(lat, bw, only_wgmma=False):
    g = collections.defaultdict(list)
    for r in rows:
        base = r['pred_with'] - r['exchange']
        ex = 0.0
        if r['exchange'] > 0 and (not only_wgmma or r['schedule'].startswith('wgmma')):
            nbytes = (r['exchange'] - 3.0) * 1.8e6  # bytes (us * TB/s)
            ex = lat + nbytes / (bw * 1e6)
        g[(r['N'], r['K'], r['M'])].append((r['us'], base + ex, r['schedule']))
    top3 = best10 = 0; rhos = []
    for k, v in g.items():
        names = {str(s) for s in candidates(k[2], k[0], k[1], 128, hopper=True, bits=4)}
        v = [x for x in v if x[2] in names]
        m = [x[0] for x in v]; p = [x[1] for x in v]
        order = sorted(range(len(v)), key=lambda i: p[i]); third = order[:max(1, -(-len(v) // 3))]
        best = min(m); top3 += min(m[i] for i in third) / best <= 1.03; best10 += m[order[0]] / best <= 1.10
        rhos.append(spearman(m, p))
    return round(sum(rhos) / len(rhos), 3), top3, best10
print('none', evaluate(0, 1e9) if False else None)
for lat, bw in ((0, 1e12), (3.0, 1.8), (4.4, 3.2), (2.0, 3.2), (1.0, 3.2), (4.4, 1e6)):
    print(lat, bw, evaluate(lat, bw), 'wgmma only', evaluate(lat, bw, True))
