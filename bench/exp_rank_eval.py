import json, collections, sys
rows=[json.loads(l) for l in open(sys.argv[1])]
def rank(v):
    order=sorted(range(len(v)), key=lambda i: v[i]); r=[0]*len(v)
    for k,i in enumerate(order): r[i]=k
    return r
def spearman(a,b):
    n=len(a); ra,rb=rank(a),rank(b); d=sum((x-y)**2 for x,y in zip(ra,rb)); return 1-6*d/(n*(n*n-1))
def pred(r, W):
    t=0
    for k in r['kernels']:
        resident=min(k['blocks'], k['slots'])*k['warps']/132
        eff=min(1, resident/W) if W else 1
        q=k['waves']/(k['blocks']/k['slots'])
        t+=max(k['dram_s']/eff, k['tc_s']*q, k['fma_s']*q, k['convert_s']*q)
    return t
g=collections.defaultdict(list)
for r in rows: g[(r['N'],r['K'],r['M'])].append(r)
for W in (0,4,6,8,10,12,16):
    res=[]
    for k,v in g.items():
        m=[r['measured_us'] for r in v]; p=[pred(r,W) for r in v]
        best=min(m); order=sorted(range(len(v)),key=lambda i:p[i]); third=order[:max(1,len(v)//3)]
        res.append((k,spearman(m,p), min(m[i] for i in third)/best, m[order[0]]/best))
    allm=[r['measured_us'] for r in rows]; allp=[pred(r,W) for r in rows]
    print(W, "pooled rho %.2f"%spearman(allm,allp), "mean rho %.2f"%(sum(x[1] for x in res)/len(res)), "top3<=1.03: %d/%d"%(sum(x[2]<=1.03 for x in res),len(res)), "best<=1.10: %d/%d"%(sum(x[3]<=1.10 for x in res),len(res)), "worst top3 %.3f"%max(x[2] for x in res))
    if W==int(sys.argv[2]) if len(sys.argv)>2 else 8:
        for x in res: print("   ",x[0], "rho %.2f top3 %.3f best %.2f"%x[1:])
