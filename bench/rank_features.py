"""Offline: per measured candidate, the model's terms (seconds by term, waves, ...), so
that variants of the time formula can be compared without walking again."""
import json, sys
from concurrent.futures import ProcessPoolExecutor
from tilevm.kernels import schedule as sch
from tilevm.kernels import matmul as mm
from tilevm.cost import hardware
from tilevm.cost.model import Resources, estimate
from tilevm import dtypes

class QW: pass

def features(r):
    qw = QW(); qw.dtype = dtypes.parse("int4"); qw.group_size = 128; qw.zeros = None
    qw.scale_dtype = dtypes.parse("f16")
    gpu = hardware.gpu("h100")
    N, K, M = r["N"], r["K"], r["M"]
    s = {str(c): c for c in sch.candidates(M, N, K, 128, hopper=True, bits=4)}[r["schedule"]]
    progs = [mm._program(qw, s, N)]
    if s.dequant:
        progs.insert(0, mm._dequantizer_program(qw))
    res = r["kernels"] if "kernels" in r else [[p.block_threads, t[4], t[5]] for p, t in zip(progs, r["terms"])]
    out = []
    for p, (threads, regs, shared) in zip(progs, res):
        names = {q.name for q in p.params}
        e = estimate(p, {k: v for k, v in {"M": M, "N": N, "K": K}.items() if k in names},
                     gpu, Resources(threads, regs, shared))
        out.append({"seconds": e.seconds, "waves": e.waves.waves, "slots": e.waves.slots,
                    "blocks": e.blocks, "threads": threads, "predicted_s": e.predicted_s})
    return {**{k: r[k] for k in ("N", "K", "M", "schedule", "measured_us")}, "kernels": out}

if __name__ == "__main__":
    rows = []
    for f in sys.argv[2:]:
        rows += [dict(json.loads(l), source=f) for l in open(f)]
    with ProcessPoolExecutor(2) as pool:
        feats = list(pool.map(features, rows, chunksize=4))
    with open(sys.argv[1], "w") as out:
        for r, f in zip(rows, feats):
            out.write(json.dumps({**f, "source": r["source"]}) + "\n")
