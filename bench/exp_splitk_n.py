"""Experiment (issue 48): K splits 2-6 of the half-atom 64-row tiling on the M = 64 cells,
graph over weight copies larger than L2 (the bench's conditions)."""
import json, statistics
import torch
from tilevm.kernels import quantize
from tilevm.kernels import matmul as mm
from tilevm.kernels.schedule import wgmma

M = 64
CELLS = [(12288, 4096), (4096, 4096), (4096, 14336), (10240, 8192), (8192, 8192), (8192, 28672)]
L2 = torch.cuda.get_device_properties(0).L2_cache_size
for N, K in CELLS:
    todo = [wgmma(64, 4, 4, 128, lead=2, prefetch=4, half_atoms=True, split_k=s)
            for s in (1, 2, 3, 4, 5, 6, 8)]
    todo = [s for s in todo if s.fits(K, 128)]
    first = quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), "int4", 128,
                     format="fragments")
    nbytes = first.packed.numel() + first.scales.numel() * 2
    copies = max(1, min(16, -(-3 * L2 // nbytes)))
    qws = [first] + [quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), "int4",
                              128, format="fragments") for _ in range(copies - 1)]
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    mm._prebuild(first, todo, N)
    stream = torch.cuda.Stream()
    for s in todo:
        with torch.cuda.stream(stream):
            plans = [mm._plan(x, q, y, s, stream.cuda_stream, (M, N)) for q in qws]
            for p in plans:
                mm._run(p, x.data_ptr(), stream.cuda_stream, y)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        calls = 4 * copies
        with torch.cuda.graph(g, stream=stream):
            for i in range(calls):
                mm._run(plans[i % copies], x.data_ptr(), stream.cuda_stream, y)
        g.replay(); torch.cuda.synchronize()
        t = []
        for _ in range(7):
            b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            b.record(); g.replay(); e.record(); e.synchronize()
            t.append(b.elapsed_time(e) * 1e3 / calls)
        print(json.dumps({"N": N, "K": K, "M": M, "schedule": str(s),
                          "us": statistics.median(t), "spread": [min(t), max(t)]}), flush=True)
    del qws, first, x, y
    torch.cuda.empty_cache()
