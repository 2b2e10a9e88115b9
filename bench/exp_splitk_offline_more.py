"""Offline: per measured candidate, the model's prediction and its pieces, and the
split-K workspace's traffic (tensors 'ws' / 'counters'). Output JSONL."""
import json, sys, time
from tilevm.kernels import schedule as sch
from tilevm.kernels import matmul as mm
from tilevm.cost import hardware
from tilevm.cost.model import Resources, estimate
from tilevm import dtypes
gpu = hardware.gpu("h100")
class QW: pass
qw = QW(); qw.dtype = dtypes.parse("int4"); qw.group_size = 128; qw.zeros = None; qw.scale_dtype = dtypes.parse("f16")
out = open(sys.argv[1], "w")
for f in sys.argv[2:]:
    cands = {}
    for line in open(f):
        r = json.loads(line)
        N, K, M = r["N"], r["K"], r["M"]
        if (N, K, M) not in cands:
            cands[(N, K, M)] = {str(s): s for s in sch.candidates(M, N, K, 128, hopper=True, bits=4)}
        s = cands[(N, K, M)].get(r["schedule"])
        if s is None or s.dequant:
            continue
        p = mm.schedule_program(qw, s, N)
        threads, regs, shared = r["kernels"][0] if "kernels" in r else (None, None, None)
        if threads is None:
            continue
        names = {q.name for q in p.params}
        t = time.time()
        e = estimate(p, {k: v for k, v in {"M": M, "N": N, "K": K}.items() if k in names}, gpu,
                     Resources(threads, regs, shared))
        tens = {k: vars(v) for k, v in e.traffic.tensors.items()}
        out.write(json.dumps({"src": f, "N": N, "K": K, "M": M, "schedule": r["schedule"],
                              "split": s.split_k, "measured_us": r["measured_us"],
                              "predicted_us": e.predicted_s * 1e6, "bound_us": e.bound_s * 1e6,
                              "seconds": e.seconds, "waves": vars(e.waves), "blocks": e.blocks,
                              "dram": e.traffic.dram, "tensors": tens,
                              "analysis_s": time.time() - t}) + "\n")
        out.flush()
