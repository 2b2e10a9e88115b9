"""Experiment (issue 45), offline: the rules of exp_rank_rules_offline.py (compute per SM,
DRAM saturation by bytes in flight) over the split-K candidates and over 237 more: the 204
of bench/results/cost_rank_h100_9d3827b.jsonl and the 44 prefill ones, recomputed with
.scratch/splitk_offline.py (bench/results/cost_rank_offline_more.jsonl)."""
import json, math, collections, statistics, re, sys
import numpy as np
SMS=132; U=0.5; LAT=5e-6
def ov(ts): return max(ts)+U*(sum(ts)-max(ts))
def knob(s, k, d=None):
    m=re.search(rf"\b{k}=(\d+)", s); return int(m.group(1)) if m else d
def inflight(r):
    s=r['schedule']; warps=knob(s,'warps'); bk=knob(s,'bk'); bm=knob(s,'bm')
    if s.startswith('wgmma'):
        half='half_atoms' in s; bn=(16 if half else 32)*warps
        if 'shared_weights' in s: bn=128 if warps==8 else 64  # guess
        lead=knob(s,'lead', knob(s,'stages')-1); pf=knob(s,'prefetch',1)
        return lead*bm*bk*2 + pf*bn*bk*4/8
    return None
def pred(r, smq, B):
    s=r['seconds']; blocks=r['blocks']; slots=r['waves']['slots']; waves=r['waves']['waves']
    warps=knob(r['schedule'],'warps'); resident=min(blocks,slots)
    f_old=min(1.0, resident*warps/SMS/8); dram=s['dram']; b=inflight(r)
    if B and b is not None:
        dram=dram*f_old/min(1.0, resident/SMS*b/B)
    compute=ov([s['tensor_core'],s['fma'],s['convert']])
    quant=math.ceil(blocks/SMS)/(blocks/SMS) if smq else waves/(blocks/slots)
    return (ov([dram, compute*quant]) + waves*LAT)*1e6
def spearman(a,b):
    ra=np.argsort(np.argsort(a)); rb=np.argsort(np.argsort(b)); return float(np.corrcoef(ra,rb)[0,1])
for f in sys.argv[1:]:
    rows=[json.loads(l) for l in open(f)]
    probs=collections.defaultdict(list)
    for r in rows: probs[(r['N'],r['K'],r['M'])].append(r)
    print(f, len(rows), len(probs))
    for smq, B in ((0,None),(1,None),(0,48e3),(1,32e3),(1,48e3),(1,64e3)):
        rhos=[]; within=0; top3=0; reg=[]; miss=[]
        for k,rs in probs.items():
            p=[pred(r,smq,B) for r in rs]; m=[r['measured_us'] for r in rs]
            if len(rs)>2: rhos.append(spearman(p,m))
            pick=m[p.index(min(p))]; within+=pick<=1.1*min(m); reg.append(pick/min(m))
            n=max(1,-(-len(rs)//3)); top=sorted(range(len(rs)),key=lambda i:p[i])[:n]; g=min(m[i] for i in top)/min(m); top3+= g<=1.03
            if g>1.03: miss.append((k, round(g,3)))
        print(f"  smq={smq} B={B}: rho {statistics.mean(rhos):.2f} best10% {within}/{len(probs)} top3rd {top3}/{len(probs)} regret {statistics.mean(reg):.3f} max {max(reg):.2f}", miss)
