"""Experiment (issue 48): the register-A main loop's codes loaded after the k-tile's
dot (EXP_LATE=1 with bench/exp_late_codes.patch) against before its conversion (as
now), every M = 64/256 candidate of the eight layers and whole atoms 3 k-tiles ahead,
graph over weight copies larger than L2, int4. In the SASS of the current order the
loads of the last stages are first read by the loop's rotation moves ~130 instructions
later (the prefetch lost); loaded after the dot, ~460 later with no moves."""
import json
import os
import statistics
from dataclasses import replace

import torch

from tilevm.kernels import matmul as mm
from tilevm.kernels import quantize
from tilevm.kernels.schedule import candidates

L2 = torch.cuda.get_device_properties(0).L2_cache_size
VARIANT = "late" if os.environ.get("EXP_LATE") else "early"


def time_cells(N, K, M, todo):
    first = quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), "int4", 128,
                     format="fragments")
    nbytes = first.packed.numel() + first.scales.numel() * 2
    copies = max(1, min(16, -(-3 * L2 // nbytes)))
    qws = [first] + [quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), "int4",
                              128, format="fragments") for _ in range(copies - 1)]
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    todo = [s for s in todo if s.fits(K, 128)]
    mm._prebuild(first, todo, N)
    stream = torch.cuda.Stream()
    ref = (x.double() @ first.dequantize().double())
    torch.cuda.synchronize()
    for s in todo:
        try:
            with torch.cuda.stream(stream):
                plans = [mm._plan(x, q, y, s, stream.cuda_stream, (M, N)) for q in qws]
                out = mm._run(plans[0], x.data_ptr(), stream.cuda_stream)
            stream.synchronize()
            err = float((out.double() - ref).abs().max() / ref.abs().max())
            g = torch.cuda.CUDAGraph()
            calls = max(20, 4 * copies)
            with torch.cuda.graph(g, stream=stream):
                for i in range(calls):
                    mm._run(plans[i % copies], x.data_ptr(), stream.cuda_stream, y)
            g.replay()
            torch.cuda.synchronize()
            t = []
            for _ in range(7):
                b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                b.record()
                g.replay()
                e.record()
                e.synchronize()
                t.append(b.elapsed_time(e) * 1e3 / calls)
            print(json.dumps({"variant": VARIANT, "N": N, "K": K, "M": M, "schedule": str(s),
                              "us": statistics.median(t), "rel_err": err}), flush=True)
        except Exception as e:
            print(json.dumps({"variant": VARIANT, "N": N, "K": K, "M": M, "schedule": str(s),
                              "error": f"{type(e).__name__}: {e}"[:300]}), flush=True)
    del qws, first, x, y
    torch.cuda.empty_cache()


LAYERS = [(12288, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (10240, 8192),
          (8192, 8192), (57344, 8192), (8192, 28672)]
for M in (64, 256):
    for N, K in LAYERS:
        todo = candidates(M, N, K, 128, hopper=True, bits=4)
        todo += [replace(s, prefetch=3) for s in todo if s.wgmma and not s.half_atoms
                 and not s.shared_weights and s.prefetch == 2]
        time_cells(N, K, M, list(dict.fromkeys(todo)))
