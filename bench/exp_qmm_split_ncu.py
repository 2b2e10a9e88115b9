"""Experiment (issue 48): where split-K's fixed cost goes: the register-A wgmma kernel at
M = 64, N = 12288, K = 512, unsplit and split 2, under ncu."""
import torch
from tilevm.kernels import quantize
from tilevm.kernels import matmul as mm
from tilevm.kernels.schedule import wgmma

N, K, M = 12288, 512, 64
w = torch.randn(K, N, device="cuda", dtype=torch.float16)
qw = quantize(w, "int4", 128, format="fragments")
x = torch.randn(M, K, device="cuda", dtype=torch.float16)
y = torch.empty(M, N, device="cuda", dtype=torch.float16)
todo = [wgmma(64, 4, 4, 128, lead=2, prefetch=2, split_k=s) for s in (1, 2)]
mm._prebuild(qw, todo, N)
stream = torch.cuda.current_stream().cuda_stream
for s in todo:
    plan = mm._plan(x, qw, y, s, stream, (M, N))
    for _ in range(3):
        mm._run(plan, x.data_ptr(), stream, y)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    mm._run(plan, x.data_ptr(), stream, y)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
