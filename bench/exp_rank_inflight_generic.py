"""Experiment (issue 45), offline: the DRAM saturation rule from cost.traffic.in_flight (commit f672e7f),
the generic fact (one iteration of the streaming loop) for every candidate, replacing the warps
rule, as a floor under it, or as a ceiling; input: .scratch/inflight_offline.py output."""
import json, math, collections, statistics, re, sys
import numpy as np
SMS=132; U=0.5; LAT=5e-6
def ov(ts): return max(ts)+U*(sum(ts)-max(ts))
def spearman(a,b):
    ra=np.argsort(np.argsort(a)); rb=np.argsort(np.argsort(b)); return float(np.corrcoef(ra,rb)[0,1])
def pred(r, B, mode):
    s=r['seconds']; blocks=r['blocks']; slots=r['waves']['slots']; waves=r['waves']['waves']
    warps=r['threads']//32; resident=min(blocks,slots)
    f_old=min(1.0, resident*warps/SMS/8); dram=s['dram']
    if B:
        f_new=min(1.0, resident/SMS*r['in_flight']/B)
        f = f_new if mode=='replace' else max(f_old,f_new) if mode=='max' else min(f_old, f_new)
        dram=dram*f_old/f
    compute=ov([s['tensor_core'],s['fma'],s['convert']])
    quant=waves/(blocks/slots)
    return (ov([dram, compute*quant]) + waves*LAT)*1e6
rows=[json.loads(l) for l in open(sys.argv[1])]
sets={'splitk(629fb23)':[r for r in rows if '629fb23' in r['src']], 'rank(9d3827b)':[r for r in rows if 'rank9d' in r['src']], 'prefill':[r for r in rows if 'prefill' in r['src']]}
for name, rs_all in sets.items():
    probs=collections.defaultdict(list)
    for r in rs_all: probs[(r['N'],r['K'],r['M'])].append(r)
    print(name, len(rs_all), len(probs))
    for mode in ('replace','max','min'):
      for B in ([None] if mode=='replace' else [])+[16e3,32e3,64e3,96e3,128e3,192e3]:
        rhos=[]; within=0; top3=0; miss=[]
        for k,rs in probs.items():
            p=[pred(r,B,mode) for r in rs]; m=[r['measured_us'] for r in rs]
            if len(rs)>2: rhos.append(spearman(p,m))
            pick=m[p.index(min(p))]; within+=pick<=1.1*min(m)
            n=max(1,-(-len(rs)//3)); top=sorted(range(len(rs)),key=lambda i:p[i])[:n]; g=min(m[i] for i in top)/min(m); top3+= g<=1.03
            if g>1.03: miss.append((k, round(g,3)))
        print(f"  {mode:7s} B={B}: rho {statistics.mean(rhos) if rhos else float('nan'):.2f} best10% {within}/{len(probs)} top3rd {top3}/{len(probs)}", miss)
