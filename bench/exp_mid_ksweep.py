"""Experiment (issue 48): the register-A wgmma kernel's time against K at M = 64,
N = 12288 (96 blocks, one wave), back to back in a CUDA graph (weights L2-resident):
per-block fixed cost and per-k-tile cost."""
import json, statistics
import torch
from tilevm.kernels import quantize
from tilevm.kernels import matmul as mm
from tilevm.kernels.schedule import wgmma

N, M = 12288, 64
for K in (512, 1024, 2048, 4096, 8192):
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    qw = quantize(w, "int4", 128, format="fragments")
    del w
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    todo = [wgmma(64, 4, 4, 128, lead=2, prefetch=p, half_atoms=h, split_k=s)
            for (p, h) in ((2, False), (4, True)) for s in (1, 2, 4) if K // 256 >= s]
    mm._prebuild(qw, todo, N)
    stream = torch.cuda.Stream()
    for s in todo:
        with torch.cuda.stream(stream):
            plan = mm._plan(x, qw, y, s, stream.cuda_stream, (M, N))
            for _ in range(3):
                mm._run(plan, x.data_ptr(), stream.cuda_stream, y)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            for _ in range(20):
                mm._run(plan, x.data_ptr(), stream.cuda_stream, y)
        g.replay(); torch.cuda.synchronize()
        t = []
        for _ in range(10):
            b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            b.record(); g.replay(); e.record(); e.synchronize()
            t.append(b.elapsed_time(e) * 1e3 / 20)
        print(json.dumps({"N": N, "K": K, "M": M, "schedule": str(s),
                          "us": statistics.median(t)}), flush=True)
    del x, y, qw
    torch.cuda.empty_cache()
