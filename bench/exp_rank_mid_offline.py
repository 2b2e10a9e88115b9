# Run at 52721b4 with exp_rank_mid_offline.patch applied (the exchange term, not adopted).
"""Offline: the cost model's ranking of the M = 64/256 candidates against their H100 times
(bench/results/qmm_mid_pair_candidates_h100_987aebd.jsonl: graph over weight copies).
Resources: ptxas's registers (local ptxas), the artifact's shared bytes."""
import json, re, subprocess, sys, tempfile, collections
from concurrent.futures import ProcessPoolExecutor
from tilevm.kernels.schedule import Schedule, candidates, wgmma
from tilevm.kernels.matmul import schedule_kernel
from tilevm.dtypes import parse
from tilevm.backend.launch import build_artifact
from tilevm.cost.hardware import GPUS
from tilevm.cost.model import estimate, Resources

rows = [json.loads(l) for l in open(sys.argv[1])]
cands = {}
for M in (64, 256):
    for N, K in {(r["N"], r["K"]) for r in rows}:
        for s in candidates(M, N, K, 128, hopper=True, bits=4):
            cands[str(s)] = s
        for sp in (1, 2, 3, 4):
            s = wgmma(64, 8, 4, 128, lead=2, prefetch=4, half_atoms=True, pair_k=True, split_k=sp)
            cands[str(s)] = s
        for st in (2, 4):
            for p in (2, 4):
                for sp in (1, 2):
                    s = wgmma(128, 8, st, 128, lead=st // 2, prefetch=p, half_atoms=True, pair_k=True, split_k=sp)
                    cands[str(s)] = s
        for sp in (1, 2):
            s = wgmma(256, 8, 2, 128, lead=1, prefetch=2, half_atoms=True, pair_k=True, split_k=sp)
            cands[str(s)] = s

def program(s):
    wide = {"wide_stores": True} if s.wgmma and not s.stream_k else {}
    return schedule_kernel(s, "f16").specialize(wdtype=parse("int4"), group_size=128, has_zeros=False, **s.constants(), **wide)

def resources(name):
    s = cands[name]
    a = build_artifact(program(s), "sm_90a")
    f = tempfile.NamedTemporaryFile(suffix=".ptx", delete=False); f.write(a.ptx.encode()); f.close()
    r = subprocess.run(["ptxas", "-arch=sm_90a", "-v", f.name, "-o", "/dev/null"], capture_output=True, text=True)
    regs = int(re.search(r"Used (\d+) registers", r.stderr).group(1))
    return name, (32 * s.num_warps, regs, a.shared_bytes)

names = sorted({r["schedule"] for r in rows})
missing = [n for n in names if n not in cands]
assert not missing, missing
with ProcessPoolExecutor(2) as ex:
    res = dict(ex.map(resources, names))

def pred(key):
    name, M, N, K = key
    s = cands[name]
    e = estimate(program(s), {"M": M, "N": N, "K": K}, GPUS["h100"], Resources(*res[name]))
    return key, (e.predicted_s * 1e6, e.exchange_s * 1e6)

def rank(v):
    order = sorted(range(len(v)), key=lambda i: v[i]); out = [0] * len(v)
    for k, i in enumerate(order): out[i] = k
    return out

def spearman(a, b):
    n = len(a); ra, rb = rank(a), rank(b)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))

with ProcessPoolExecutor(2) as ex:
    preds = dict(ex.map(pred, [(r["schedule"], r["M"], r["N"], r["K"]) for r in rows]))
groups = collections.defaultdict(list)
for r in rows:
    r["pred_with"], r["exchange"] = preds[(r["schedule"], r["M"], r["N"], r["K"])]
    groups[(r["N"], r["K"], r["M"])].append(r)
for with_exchange in (False, True):
  print("with the exchange" if with_exchange else "without the exchange")
  for r in rows:
    r["pred"] = r["pred_with"] - (0 if with_exchange else r["exchange"])
  top3 = best10 = 0; rhos = []
  for k, v in groups.items():
    v = [r for r in v if cands[r["schedule"]] in candidates(k[2], k[0], k[1], 128, hopper=True, bits=4)]
    m = [r["us"] for r in v]; p = [r["pred"] for r in v]
    order = sorted(range(len(v)), key=lambda i: p[i]); third = order[:max(1, -(-len(v) // 3))]
    best = min(m); t3 = min(m[i] for i in third) / best; b = m[order[0]] / best
    rho = spearman(m, p); rhos.append(rho); top3 += t3 <= 1.03; best10 += b <= 1.10
    print(k, len(v), f"rho {rho:.2f} top-third {t3:.3f} predicted best {b:.2f} ({v[order[0]]['schedule'][6:]}; measured best {v[m.index(best)]['schedule'][6:]})")
  print(f"mean rho {sum(rhos)/len(rhos):.2f}, top third within 3%: {top3}/{len(groups)}, predicted best within 10%: {best10}/{len(groups)}")
json.dump([{k: r[k] for k in ("N", "K", "M", "schedule", "us", "pred_with", "exchange")} for r in rows], open(sys.argv[2], "w"))
