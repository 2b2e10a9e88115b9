"""Ablation (issue 48): where split-K's 7 us go, with bench/exp_splitk_ablation.patch
applied (`git apply`). ABL env: clamp (no code loads past the split), noguard (no
`if k < k_len` around copies), nored (no reduction: each split stores y, wrong values),
nocount (park, then every split stores y), countall (count, then every split stores y),
countonly (count, only the last stores its own sums), parkonly (park and count, the last
stores its own sums); ATOM_ORDER=relaxed: the count's atomic relaxed. Same-blocks
control, L2-resident, graph."""
import json
import os
import statistics

import torch

from tilevm.kernels import matmul as mm
from tilevm.kernels import quantize
from tilevm.kernels.schedule import wgmma

M = 64
for N, K, sp in ((12288, 1024, 2), (24576, 512, 1), (6144, 1024, 2), (12288, 512, 1),
                 (12288, 4096, 2), (12288, 4096, 1)):
    if os.environ.get("ABL") and sp == 1:
        continue
    qw = quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), "int4", 128,
                  format="fragments")
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    s = wgmma(64, 4, 4, 128, lead=2, prefetch=4, half_atoms=True, split_k=sp)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        plan = mm._plan(x, qw, y, s, stream.cuda_stream, (M, N))
        for _ in range(3):
            mm._run(plan, x.data_ptr(), stream.cuda_stream, y)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for _ in range(20):
            mm._run(plan, x.data_ptr(), stream.cuda_stream, y)
    g.replay()
    torch.cuda.synchronize()
    t = []
    for _ in range(10):
        b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        b.record()
        g.replay()
        e.record()
        e.synchronize()
        t.append(b.elapsed_time(e) * 1e3 / 20)
    print(json.dumps({"abl": os.environ.get("ABL", ""), "N": N, "K": K, "split": sp,
                      "us": round(statistics.median(t), 2)}), flush=True)
