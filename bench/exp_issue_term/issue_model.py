# ruff: noqa  (an offline experiment of one commit: bench/exp_issue_term/README.md)
"""Offline exploration: an issue-rate term from the SASS of each candidate's main loop."""
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor

os.environ["PATH"] = "/work/venv/lib/python3.11/site-packages/nvidia/cu13/bin:" + os.environ["PATH"]
from tilevm.backend.launch import build_artifact
from tilevm.cost.hardware import GPUS
from tilevm.cost.model import Resources, estimate
from tilevm.dtypes import parse
from tilevm.kernels.matmul_launch import schedule_kernel
from tilevm.kernels.tilings import candidates

rows = [json.loads(l) for l in open('/work/main/bench/results/qmm_mid_pair_candidates_h100_987aebd.jsonl')]
rows = [r for r in rows if 'us' in r]
def parse_sched(name):
    for M in (64, 256):
        for N, K in {(r['N'], r['K']) for r in rows}:
            for s in candidates(M, N, K, 128, hopper=True, bits=4):
                if str(s) == name: return s
    return None
names = sorted({r['schedule'] for r in rows})
S = {n: parse_sched(n) for n in names}
print('unparsed', [n for n in names if S[n] is None], file=sys.stderr)

def program(s):
    wide = {"wide_stores": True} if s.wgmma and not s.stream_k else {}
    return schedule_kernel(s, "f16").specialize(wdtype=parse("int4"), group_size=128, has_zeros=False, **s.constants(), **wide)

def loop_stats(sass):
    ins, labels = [], {}
    for l in sass.splitlines():
        lab = re.match(r"^\s*(\.L_x_\d+):", l)
        if lab:
            labels[lab.group(1)] = len(ins)
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,5})\*/\s+(.*?);", l)
        if m: ins.append((int(m.group(1), 16), m.group(2).strip()))
    loops = []
    for i, (a, t) in enumerate(ins):
        m = re.search(r"BRA\s+`?\(?(\.L_x_\d+)\)?", t)
        if m and t.startswith('@') and labels.get(m.group(1), 1 << 30) < i:
            st = labels[m.group(1)]
            if any(('HGMMA' in x[1] or 'HMMA' in x[1]) for x in ins[st:i]):
                loops.append((st, i))
    st, en = max(loops, key=lambda l: sum(('HGMMA' in x[1] or 'HMMA' in x[1]) for x in ins[l[0]:l[1]+1]) * 10000 - (l[1]-l[0]))
    body = ins[st:en + 1]
    hg = [t for _, t in body if 'HGMMA' in t]
    hm = [t for _, t in body if re.search(r'\bHMMA', t)]
    n = int(re.search(r'HGMMA\.64x(\d+)x16', hg[0]).group(1)) if hg else None
    return len(body), len(hg), len(hm), n, len(ins)


def resources(name):
    s = S[name]
    a = build_artifact(program(s), "sm_90a")
    d = tempfile.mkdtemp()
    open(f"{d}/k.ptx", "w").write(a.ptx)
    r = subprocess.run(["ptxas", "-arch=sm_90a", "-v", f"{d}/k.ptx", "-o", f"{d}/k.cubin"], capture_output=True, text=True)
    regs = int(re.search(r"Used (\d+) registers", r.stderr).group(1))
    sass = subprocess.run(["nvdisasm", "-c", f"{d}/k.cubin"], capture_output=True, text=True).stdout
    return name, (32 * s.num_warps, regs, a.shared_bytes), loop_stats(sass)

if __name__ == "__main__":
    with ProcessPoolExecutor(2) as ex:
        res = {n: (r, l) for n, r, l in ex.map(resources, [n for n in names if S[n]])}
    out = []
    for r in rows:
        s = S.get(r['schedule'])
        if s is None: continue
        R, L = res[r['schedule']]
        e = estimate(program(s), {"M": r['M'], "N": r['N'], "K": r['K']}, GPUS["h100"], Resources(*R))
        out.append(dict(r, regs=R[1], smem=R[2], loop=L, pred=e.predicted_s * 1e6,
                        tc=e.traffic.flops.get("tensor_core", 0), blocks=e.blocks,
                        bps=e.occupancy.blocks_per_sm, slots=e.waves.slots, waves=e.waves.waves,
                        seconds={k: v * 1e6 for k, v in e.seconds.items()}, warps=s.num_warps))
    pickle.dump(out, open('/tmp/issue_data.pkl', 'wb'))
    print(len(out))
