# ruff: noqa  (an offline experiment of one commit: bench/exp_issue_term/README.md)
import collections
import pickle

d=pickle.load(open('/tmp/issue_data.pkl','rb'))
CLOCK=1.98e9; SMS=132
def t_issue(r, L):
    loop, hg, hm, n, total = r['loop']
    if hg:
        flops_per_warp_iter = hg * 2*64*n*16 / 4
    else:
        flops_per_warp_iter = hm * 4096
    instr = r['tc'] / flops_per_warp_iter * loop  # warp-instructions, whole launch
    resident = min(r['blocks'], r['slots']) * r['warps'] / SMS / 4  # warps a scheduler
    ipc = min(1.0, resident / L)
    # the blocks beyond one wave run after: instructions per scheduler over the waves
    return instr / SMS / 4 / ipc / CLOCK * 1e6
def rank(v):
    o=sorted(range(len(v)),key=lambda i:v[i]); out=[0]*len(v)
    for k,i in enumerate(o): out[i]=k
    return out
def spear(a,b):
    n=len(a); ra,rb=rank(a),rank(b)
    return 1-6*sum((x-y)**2 for x,y in zip(ra,rb))/(n*(n*n-1))
groups=collections.defaultdict(list)
for r in d: groups[(r['N'],r['K'],r['M'])].append(r)
def evaluate(f):
    top3=best10=0; rhos=[]
    for k,v in groups.items():
        m=[r['us'] for r in v]; p=[f(r) for r in v]
        o=sorted(range(len(v)),key=lambda i:p[i]); third=o[:max(1,-(-len(v)//3))]
        best=min(m); top3+=min(m[i] for i in third)/best<=1.03; best10+=m[o[0]]/best<=1.10
        rhos.append(spear(m,p))
    return sum(rhos)/len(rhos), top3, best10, len(groups)
if __name__ == "__main__":
  print("base", evaluate(lambda r: r['pred']))
  for L in (2,3,4,6,8,12):
    print('max L=%d'%L, evaluate(lambda r: max(r['pred'], t_issue(r,L))),
          ' sum', evaluate(lambda r: r['pred'] + t_issue(r,L)),
          ' half', evaluate(lambda r: max(r['pred'], t_issue(r,L)) + 0.5*min(r['pred'], t_issue(r,L))))
