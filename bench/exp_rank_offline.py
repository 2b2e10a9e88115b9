"""Offline: the current model's predictions for the 204 measured candidates (resources as
measured on the H100), written as JSON lines."""
import json, sys
from tilevm.kernels import schedule as sch
from tilevm.kernels import matmul as mm
from tilevm.kernels.weights import QuantizedWeight
from tilevm.cost import hardware
from tilevm.cost.model import Resources, estimate
from tilevm import dtypes
import numpy as np

rows = [json.loads(l) for l in open("bench/results/cost_rank_h100_9d3827b.jsonl")]
gpu = hardware.gpu("h100")
cands = {}
out = open(sys.argv[1], "w")
for r in rows:
    N, K, M = r["N"], r["K"], r["M"]
    key = (N, K, M)
    if key not in cands:
        cands[key] = {str(s): s for s in sch.candidates(M, N, K, 128, hopper=True, bits=4)}
    s = cands[key][r["schedule"]]
    # a stand-in QuantizedWeight: only dtype, group size, zeros and scale dtype matter here
    class QW: pass
    qw = QW(); qw.dtype = dtypes.parse("int4"); qw.group_size = 128; qw.zeros = None
    qw.scale_dtype = dtypes.parse("f16")
    progs = [mm._program(qw, s, N)]
    if s.dequant:
        progs.insert(0, mm._dequantizer_program(qw))
    pred = 0.0; feats = []
    for program, t in zip(progs, r["terms"]):
        _, bps, waves, blocks, regs, shared = t
        threads = program.block_threads
        names = {p.name for p in program.params}
        e = estimate(program, {k: v for k, v in {"M": M, "N": N, "K": K}.items() if k in names},
                     gpu, Resources(threads, regs, shared))
        feats.append({"dram_s": e.seconds["dram"], "tc_s": e.seconds["tensor_core"],
                      "fma_s": e.seconds["fma"], "convert_s": e.seconds["convert"],
                      "predicted_s": e.predicted_s, "blocks": e.blocks,
                      "bps": e.occupancy.blocks_per_sm, "slots": e.waves.slots,
                      "waves": e.waves.waves, "warps": threads // 32, "dram": e.traffic.dram})
    out.write(json.dumps({**{k: r[k] for k in ("N", "K", "M", "schedule", "measured_us")},
                          "kernels": feats}) + "\n"); out.flush()
