"""Experiment (issue 48): does the producer warp slow the register-A kernel by polling its
barriers? One process per variant (bench/exp_suspend.patch reads the environment):
EXP_PRODUCER=1 gives the unclustered kernel the producer warp, EXP_SUSPEND=N gives every
mbarrier.try_wait a suspend-time hint of N ns. Graph over weight copies larger than L2,
int4."""
import json
import os
import statistics

import torch

from tilevm.kernels import matmul as mm
from tilevm.kernels import quantize
from tilevm.kernels.schedule import wgmma

L2 = torch.cuda.get_device_properties(0).L2_cache_size
VARIANT = ",".join(k for k in ("EXP_PRODUCER", "EXP_SUSPEND")
                   if os.environ.get(k)) or "default"


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


for N, K, M in ((12288, 4096, 64), (57344, 8192, 64), (12288, 4096, 256)):
    bm = 64 if M <= 64 else 128
    todo = [wgmma(bm, 4, 4, 128, lead=lead, prefetch=4, half_atoms=True, cluster_n=c)
            for c in (1, 2) for lead in (2, 3)]
    time_cells(N, K, M, todo)
