"""Experiment (issue 48): ncu stall reasons and instruction counts of the register-A wgmma
kernel at M = 64 (8B qkv), unsplit and split 2, prefetch 2 and 4. Run under
`ncu --profile-from-start off`."""
import torch
from tilevm.kernels import quantize
from tilevm.kernels import matmul as mm
from tilevm.kernels.schedule import wgmma

N, K, M = 12288, 4096, 64
w = torch.randn(K, N, device="cuda", dtype=torch.float16)
qw = quantize(w, "int4", 128, format="fragments")
x = torch.randn(M, K, device="cuda", dtype=torch.float16)
y = torch.empty(M, N, device="cuda", dtype=torch.float16)
todo = [wgmma(64, 4, 4, 128, lead=2, prefetch=p, split_k=s) for p, s in ((2, 1), (2, 2), (4, 1))]
mm._prebuild(qw, todo, N)
stream = torch.cuda.current_stream().cuda_stream
for s in todo:
    plan = mm._plan(x, qw, y, s, stream, (M, N))
    mm._run(plan, x.data_ptr(), stream, y)
    torch.cuda.synchronize()
    print(s, flush=True)
    torch.cuda.cudart().cudaProfilerStart()
    mm._run(plan, x.data_ptr(), stream, y)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
