# ruff: noqa  (an offline experiment of one commit: bench/exp_issue_term/README.md)
import collections
import pickle
import sys

sys.path.insert(0, __import__('os').path.dirname(__file__))
from issue_eval import spear, t_issue

d=pickle.load(open('/tmp/issue_valid.pkl','rb'))
def evaluate(rows, f):
    groups=collections.defaultdict(list)
    for r in rows: groups[(r['N'],r['K'],r['M'])].append(r)
    top3=best10=0; rhos=[]; pooled_m=[]; pooled_p=[]
    for k,v in groups.items():
        if len(v)<2: continue
        m=[r['us'] for r in v]; p=[f(r) for r in v]
        o=sorted(range(len(v)),key=lambda i:p[i]); third=o[:max(1,-(-len(v)//3))]
        best=min(m); top3+=min(m[i] for i in third)/best<=1.03; best10+=m[o[0]]/best<=1.10
        rhos.append(spear(m,p)); pooled_m+=m; pooled_p+=p
    return round(sum(rhos)/len(rhos),3), top3, best10, len(rhos), round(spear(pooled_m,pooled_p),3)
for src in sorted({r['src'] for r in d}):
    rows=[r for r in d if r['src']==src]
    print(src, len(rows), 'base', evaluate(rows, lambda r: r['pred']))
    for L in (2,3,4,6):
        print('   L=%d sum'%L, evaluate(rows, lambda r: r['pred']+t_issue(r,L)), 'half', evaluate(rows, lambda r: max(r['pred'],t_issue(r,L))+0.5*min(r['pred'],t_issue(r,L))), 'max', evaluate(rows, lambda r: max(r['pred'],t_issue(r,L))))
