"""Experiment (issue 48): beside the tuner's candidates at M = 64/256 (int4, graph over
weight copies larger than L2), the shared-weights kernel with K split (1-6), the
register-A kernel's codes 6/8 k-tiles ahead and column tiles sharing x (cluster_n)."""
import json
import statistics

import torch

from tilevm.kernels import matmul as mm
from tilevm.kernels import quantize
from tilevm.kernels.schedule import candidates, wgmma

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
      try:
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
      except Exception as e:  # a compile error (e.g. too many registers): next schedule
        print(json.dumps({"N": N, "K": K, "M": M, "schedule": str(s),
                          "error": f"{type(e).__name__}: {e}"[:300]}), flush=True)
    del qws, first, x, y
    torch.cuda.empty_cache()





def shared_splits(M, N, K):
    found = candidates(M, N, K, 128, hopper=True, bits=4)
    bm = 64 if M <= 64 else 256
    found += [wgmma(bm, 8, 4, 128, lead=2, prefetch=4, shared_weights=True, split_k=sp)
              for sp in (1, 2, 3, 4, 6)]
    # the codes 6 or 8 k-tiles ahead in one warpgroup of half atoms (REGISTER_A_AHEAD)
    deep_bm = 64 if M <= 64 else 128
    found += [wgmma(deep_bm, 4, 4, 128, lead=2, prefetch=p, half_atoms=True, split_k=sp)
              for p in (6, 8) for sp in ((1, 2, 3, 4) if M <= 64 else (1, 2))]
    # column tiles sharing x's copies (cluster_n, a producer warp multicasting them)
    found += [wgmma(deep_bm, 4, 4, 128, lead=2, prefetch=p, half_atoms=True, cluster_n=c)
              for p in (4, 8) for c in (2, 4)]
    found += [wgmma(64, 4, 4, 128, lead=2, prefetch=2, cluster_n=c) for c in (2, 4)]
    return [s for s in dict.fromkeys(found) if s.fits(K, 128)]


LAYERS = [(12288, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (10240, 8192),
          (8192, 8192), (57344, 8192), (8192, 28672)]
for M in (256, 64):
    for N, K in LAYERS:
        time_cells(N, K, M, shared_splits(M, N, K))
