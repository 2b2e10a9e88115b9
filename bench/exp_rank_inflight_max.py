"""Experiment (issue 45), offline: the bytes-in-flight DRAM rule as a floor under the warps rule
(max of the two factors) instead of a replacement, over the same two candidate sets.
Needs /tmp/eval_rules.py = bench/exp_rank_rules_offline2.py of commit 49ceb2c."""
import sys
sys.argv=['x']
exec(open('/tmp/eval_rules.py').read().split("for f in sys.argv[1:]:")[0])
def pred_max(r, B):
    s=r['seconds']; blocks=r['blocks']; slots=r['waves']['slots']; waves=r['waves']['waves']
    warps=knob(r['schedule'],'warps'); resident=min(blocks,slots)
    f_old=min(1.0, resident*warps/SMS/8); dram=s['dram']; b=inflight(r)
    if B and b is not None:
        dram=dram*f_old/max(f_old, min(1.0, resident/SMS*b/B))
    compute=ov([s['tensor_core'],s['fma'],s['convert']])
    quant=waves/(blocks/slots)
    return (ov([dram, compute*quant]) + waves*LAT)*1e6
for f in ['bench/results/cost_splitk_offline_f1cd492.jsonl','bench/results/cost_rank_offline_more.jsonl']:
    rows=[json.loads(l) for l in open(f)]
    probs=collections.defaultdict(list)
    for r in rows: probs[(r['N'],r['K'],r['M'])].append(r)
    for B in (None, 24e3, 32e3, 48e3, 64e3, 96e3):
        rhos=[]; within=0; top3=0; reg=[]; miss=[]
        for k,rs in probs.items():
            p=[pred_max(r,B) for r in rs]; m=[r['measured_us'] for r in rs]
            if len(rs)>2: rhos.append(spearman(p,m))
            pick=m[p.index(min(p))]; within+=pick<=1.1*min(m); reg.append(pick/min(m))
            n=max(1,-(-len(rs)//3)); top=sorted(range(len(rs)),key=lambda i:p[i])[:n]; g=min(m[i] for i in top)/min(m); top3+= g<=1.03
            if g>1.03: miss.append((k, round(g,3)))
        print(f[-30:], B, f"rho {statistics.mean(rhos):.2f} best10% {within}/{len(probs)} top3rd {top3}/{len(probs)} regret {statistics.mean(reg):.3f}", miss)
