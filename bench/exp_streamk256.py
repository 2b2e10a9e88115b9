"""Experiment (issue 48): stream-K at M = 256 with wider tiles, beside the tuner's candidates. Was: does a second warp a scheduler pay at M = 64/256? Two
warpgroups of half atoms a block (8 warps, 128 columns) split 1/2/4, codes 2 or 4
k-tiles ahead, and two warpgroups on the two k-tiles of each pair of one 64-column tile
(`pair_k`), against one warpgroup (4 warps, 64 columns) split 1/2/3/4, graph over
weight copies larger than L2."""
import json
import statistics
import sys

import torch

from tilevm.kernels import matmul as mm
from tilevm.kernels import quantize
from tilevm.kernels.schedule import wgmma, candidates

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





def streamk(M, N, K):
    found = candidates(M, N, K, 128, hopper=True, bits=4)
    for bm, warps, p in ((128, 4, 4), (256, 4, 2), (128, 8, 2), (256, 8, 2), (128, 8, 4)):
        for sk in (1, 2):
            found.append(wgmma(bm, warps, 4, 128, lead=2, prefetch=p, half_atoms=True,
                               stream_k=sk))
    found.append(wgmma(256, 4, 4, 128, lead=2, prefetch=2, stream_k=1))  # whole atoms
    return found


LAYERS = [(12288, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (10240, 8192),
          (8192, 8192), (57344, 8192), (8192, 28672)]
for N, K in LAYERS:
    time_cells(N, K, 256, streamk(256, N, K))
