"""Experiment (issue 48): K splits reduced through distributed shared memory (a tile's
splits one cluster, `split_cluster`) against the workspace-and-counter reduction, M = 64
and 256 cells, graph over weight copies larger than L2; plus the same-blocks control
(split 2 at N = 12288, K = 1024 against unsplit N = 24576, K = 512, L2-resident)."""
import json
import statistics
import sys

import torch

from tilevm.kernels import matmul as mm
from tilevm.kernels import quantize
from tilevm.kernels.schedule import wgmma

L2 = torch.cuda.get_device_properties(0).L2_cache_size


def time_cells(N, K, M, todo, rotate=True):
    first = quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), "int4", 128,
                     format="fragments")
    nbytes = first.packed.numel() + first.scales.numel() * 2
    copies = max(1, min(16, -(-3 * L2 // nbytes))) if rotate else 1
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
        with torch.cuda.stream(stream):
            plans = [mm._plan(x, q, y, s, stream.cuda_stream, (M, N)) for q in qws]
            out = mm._run(plans[0], x.data_ptr(), stream.cuda_stream)
            again = mm._run(plans[0], x.data_ptr(), stream.cuda_stream)
        stream.synchronize()
        err = float((out.double() - ref).abs().max() / ref.abs().max())
        same = bool(torch.equal(out, again))
        with torch.cuda.stream(stream):
            for p in plans:
                mm._run(p, x.data_ptr(), stream.cuda_stream, y)
        torch.cuda.synchronize()
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
        print(json.dumps({"N": N, "K": K, "M": M, "schedule": str(s), "rotated": rotate,
                          "us": statistics.median(t), "spread": [min(t), max(t)],
                          "rel_err": err, "repeatable": same}), flush=True)
    del qws, first, x, y
    torch.cuda.empty_cache()


def variants(bm, half, prefetch, splits):
    out = []
    for sp in splits:
        out.append(wgmma(bm, 4, 4, 128, lead=2, prefetch=prefetch, half_atoms=half,
                         split_k=sp))
        if sp in (2, 4, 8):
            out.append(wgmma(bm, 4, 4, 128, lead=2, prefetch=prefetch, half_atoms=half,
                             split_k=sp, split_cluster=True))
    return out


if "control" in sys.argv[1:]:
    for N, K, sp in ((12288, 1024, 2), (24576, 512, 1), (12288, 2048, 4), (49152, 512, 1)):
        time_cells(N, K, 64, variants(64, True, 4, [sp]), rotate=False)
CELLS = [(12288, 4096, 64), (4096, 4096, 64), (4096, 14336, 64), (10240, 8192, 64),
         (8192, 8192, 64), (8192, 28672, 64), (57344, 8192, 64), (28672, 4096, 64)]
for N, K, M in CELLS:
    time_cells(N, K, M, variants(64, True, 4, (1, 2, 3, 4, 8)) + variants(64, False, 2, (2, 4, 8)))
CELLS256 = [(12288, 4096), (4096, 4096), (4096, 14336), (10240, 8192), (8192, 8192)]
for N, K in CELLS256:
    time_cells(N, K, 256, variants(128, True, 4, (1, 2, 4)) + variants(64, True, 4, (2, 4, 8)))
