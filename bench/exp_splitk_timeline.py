"""Experiment (issue 48): a per-block timeline of split-K (with
bench/exp_splitk_timeline.patch applied): SM, start, main loop's end, after the count,
end (ns within the second), and the count's old value, for the last of 20 launches back
to back in a graph. Half atoms, M = 64, L2-resident."""
import json
import statistics

import torch

from tilevm.kernels import matmul as mm
from tilevm.kernels import quantize
from tilevm.kernels.schedule import wgmma

M = 64
stream = torch.cuda.Stream()
mm._splitk_buffers(torch.device("cuda", 0), stream.cuda_stream, 24 * 2**20, 8192)
for N, K, sp in ((12288, 1024, 2), (24576, 512, 1), (6144, 1024, 2), (12288, 512, 1),
                 (12288, 4096, 2), (12288, 4096, 1)):
    qw = quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), "int4", 128,
                  format="fragments")
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    s = wgmma(64, 4, 4, 128, lead=2, prefetch=4, half_atoms=True, split_k=sp)
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
    for _ in range(5):
        b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        b.record()
        g.replay()
        e.record()
        e.synchronize()
        t.append(b.elapsed_time(e) * 1e3 / 20)
    ws = mm._splitk[(torch.device("cuda", 0), stream.cuda_stream)][0]
    blocks = N // 64 * sp
    rows = ws[16 * 2**20: 16 * 2**20 + blocks * 8].view(torch.int32).view(blocks, 8)
    print(json.dumps({"N": N, "K": K, "split": sp, "us": round(statistics.median(t), 2),
                      "blocks": rows[:, :6].cpu().tolist()}), flush=True)
