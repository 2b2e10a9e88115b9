"""Experiment (issue 48): what a K split costs beyond its extra blocks. Pairs with the
same blocks and k-tiles a block (8), one split and one not: split s at N, K against
unsplit at s*N, K/s (M = 64, int4, back to back in a CUDA graph, weights L2-resident)."""
import json, statistics
import torch
from tilevm.kernels import quantize
from tilevm.kernels import matmul as mm
from tilevm.kernels.schedule import wgmma

M = 64
CASES = [(6144, 1024, 2), (12288, 512, 1), (12288, 1024, 2), (24576, 512, 1),
         (12288, 2048, 4), (49152, 512, 1), (3072, 2048, 4), (12288, 4096, 8),
         (98304, 512, 1), (12288, 2048, 2), (24576, 1024, 1)]
for N, K, split in CASES:
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    qw = quantize(w, "int4", 128, format="fragments")
    del w
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    todo = [wgmma(64, 4, 4, 128, lead=2, prefetch=p, half_atoms=h, split_k=split)
            for (p, h) in ((2, False), (4, True))]
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
        print(json.dumps({"N": N, "K": K, "M": M, "blocks": N // 128 * split,
                          "ktiles_a_block": K // 64 // split, "schedule": str(s),
                          "us": statistics.median(t)}), flush=True)
    del x, y, qw
    torch.cuda.empty_cache()
