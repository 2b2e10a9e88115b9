# ruff: noqa  (an offline experiment of one commit: bench/exp_issue_term/README.md)
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor

os.environ["PATH"] = "/work/venv/lib/python3.11/site-packages/nvidia/cu13/bin:" + os.environ["PATH"]
sys.path.insert(0, os.path.dirname(__file__))
from issue_model import loop_stats, program

from tilevm.backend.launch import build_artifact
from tilevm.cost.hardware import GPUS
from tilevm.cost.model import Resources, estimate
from tilevm.kernels.schedule import Schedule


def parse(name):
    t = name.split()
    kw = {}
    i = 0
    if t[0] == 'wgmma':
        kw['wgmma'] = True; i = 1
        if t[1] in ('shared_weights', 'half_atoms', 'dequant'):
            kw[t[1]] = True; i = 2
    elif t[0] == 'staged':
        kw['staged'] = True; i = 1
    for tok in t[i:]:
        if '=' in tok:
            k, v = tok.split('='); kw['num_warps' if k == 'warps' else k] = int(v)
        elif tok == 'x_global': kw['x_shared'] = False
        else: kw[tok] = True
    return Schedule(**kw)

def resources(name):
    s = parse(name)
    if s.dequant: return name, None, None
    a = build_artifact(program(s), "sm_90a")
    d = tempfile.mkdtemp()
    open(f"{d}/k.ptx", "w").write(a.ptx)
    r = subprocess.run(["ptxas", "-arch=sm_90a", "-v", f"{d}/k.ptx", "-o", f"{d}/k.cubin"], capture_output=True, text=True)
    m = re.search(r"Used (\d+) registers", r.stderr)
    if not m: return name, None, None
    sass = subprocess.run(["nvdisasm", "-c", f"{d}/k.cubin"], capture_output=True, text=True).stdout
    try:
        L = loop_stats(sass)
    except ValueError:
        L = None
    return name, (32 * s.num_warps, int(m.group(1)), a.shared_bytes), L

if __name__ == "__main__":
    out = []
    for f in sys.argv[1:]:
        rows = [json.loads(l) for l in open(f)]
        names = sorted({r['schedule'] for r in rows})
        with ProcessPoolExecutor(2) as ex:
            res = {n: (R, L) for n, R, L in ex.map(resources, names)}
        for r in rows:
            R, L = res[r['schedule']]
            if R is None or L is None: continue
            s = parse(r['schedule'])
            e = estimate(program(s), {"M": r['M'], "N": r['N'], "K": r['K']}, GPUS["h100"], Resources(*R))
            out.append(dict(N=r['N'], K=r['K'], M=r['M'], schedule=r['schedule'], us=r['measured_us'],
                            src=os.path.basename(f), loop=L, pred=e.predicted_s * 1e6,
                            tc=e.traffic.flops.get("tensor_core", 0), blocks=e.blocks,
                            bps=e.occupancy.blocks_per_sm, slots=e.waves.slots, warps=s.num_warps))
    pickle.dump(out, open('/tmp/issue_valid.pkl', 'wb'))
    print(len(out))
