"""Experiment (issue 48): two warpgroups of whole atoms on k-tile pairs (`pair_k`
without half atoms) for the widths whose conversion is dearest, f6e3m2 and int8, between
decode and prefill. For int3 they beat the matrix run's picks by 11-16% on three of four
cells (qmm_producer_fix_h200_0cac3a8.jsonl, part D) and are now its candidates; for int4
the half-atom picks stayed ahead. At M = 64 f6e3m2 and int8 trail Humming by 0.81-0.96x
(qmm_matrix_h200_eec0b94): more warps a scheduler may hide their longer conversion.
For each of the eight layers at M = 64 and 256: the matrix run's pick (run 2's JSON),
then the whole-atom pairs 64 x 128 unsplit and split in two, and 128 x 128 split 1 and 2
(from 65 rows). Graph over weight copies larger than L2; one JSON line a measurement."""
import json
import statistics
import sys

import torch

from tilevm.kernels import matmul_launch as ml
from tilevm.kernels import quantize
from tilevm.kernels.schedule import Schedule, wgmma
from tilevm.kernels.tilings import candidates

L2 = torch.cuda.get_device_properties(0).L2_cache_size
MATRIX = "bench/results/qmm_matrix_h200_eec0b94/run2/qmm.json"
TYPES = sys.argv[1].split(",") if len(sys.argv) > 1 else ["f6e3m2", "int8"]


def replay_us(run, calls: int) -> float:
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        run(0, stream.cuda_stream)
    stream.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for i in range(calls):
            run(i, stream.cuda_stream)
    g.replay()
    torch.cuda.synchronize()
    t = []
    for _ in range(9):
        b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        b.record()
        g.replay()
        e.record()
        e.synchronize()
        t.append(b.elapsed_time(e) * 1e3 / calls)
    return statistics.median(t)


def time_schedules(part, name, N, K, M, todo, wdtype="int4"):
    first = quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), wdtype, 128,
                     format="fragments")
    nbytes = first.packed.numel() + first.scales.numel() * 2
    copies = max(1, min(16, -(-3 * L2 // nbytes)))
    qws = [first] + [quantize(torch.randn(K, N, device="cuda", dtype=torch.float16),
                              wdtype, 128, format="fragments") for _ in range(copies - 1)]
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    ref = x.double() @ first.dequantize().double()
    todo = [s for s in dict.fromkeys(todo) if s.fits(K, 128)]
    ml.prebuild_schedules(first, todo, N)
    for s in todo:
        row = {"part": part, "layer": name, "N": N, "K": K, "M": M, "wdtype": wdtype,
               "schedule": str(s)}
        try:
            stream = torch.cuda.current_stream().cuda_stream
            out = ml.run_plan(ml.plan_call(x, first, y, s, stream, (M, N)), x.data_ptr(),
                              stream)
            torch.cuda.synchronize()
            row["rel_err"] = float((out.double() - ref).abs().max() / ref.abs().max())
            on = {}  # the plans for the capture's stream

            def run(i, stream, s=s, on=on):
                if stream not in on:
                    on[stream] = [ml.plan_call(x, q, y, s, stream, (M, N)) for q in qws]
                ml.run_plan(on[stream][i % copies], x.data_ptr(), stream, y)
            row["us"] = replay_us(run, max(20, 4 * copies))
        except Exception as e:  # noqa: BLE001 (a variant that fails is a finding)
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        print(json.dumps(row), flush=True)
    torch.cuda.empty_cache()


def pick(rows, layer: str, N: int, K: int, M: int, wdtype: str) -> Schedule | None:
    """The matrix run's schedule for this cell: the candidate printed as it was (the
    even widths' candidates are those of that run)."""
    bits = {"f6e3m2": 6, "int8": 8}.get(wdtype, 4)
    named = {str(s): s for s in candidates(M, N, K, 128, hopper=True, bits=bits)}
    for r in rows:
        if (r.get("backend"), r.get("shape"), r.get("M"), r.get("wdtype")) == \
                ("tilevm", layer, M, wdtype) and r.get("compile"):
            return named.get(r["compile"]["schedule"])
    return None


rows = json.load(open(MATRIX))["results"]
layers = {(r["shape"], r["N"], r["K"]) for r in rows if r.get("backend") == "tilevm"}
for wdtype in TYPES:
    for M in (64, 256):
        for name, N, K in sorted(layers):
            best = pick(rows, name, N, K, M, wdtype)
            pairs = [wgmma(bm, 8, 4, 128, lead=2, prefetch=2, pair_k=True, split_k=k)
                     for bm in ((64,) if M <= 64 else (64, 128)) for k in (1, 2)]
            time_schedules("P", name, N, K, M, ([best] if best else []) + pairs,
                           wdtype=wdtype)
