"""mmprof.py: one launch each of wt_matmul (f16 W^T) and cuBLAS (torch.matmul) on 8B qkv and
70B o, M = 4096, between cudaProfilerStart/Stop (for ncu --profile-from-start off)."""
import torch

from tilevm.backend.launch import compiled_kernel
from tilevm.bench.ab import profile_once
from tilevm.bench.qmm import SHAPES
from tilevm.kernels.qmm_dequant import wt_matmul_kernel

mm = compiled_kernel(wt_matmul_kernel("f16").specialize())
runs = []
for shape in ("8b.qkv", "70b.o"):
    N, K = SHAPES[shape]
    M = 4096
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    runs.append(lambda x=x, wt=wt, y=y, M=M, N=N, K=K: mm(x, wt, y, M, N, K))
    runs.append(lambda x=x, wt=wt, y=y: torch.matmul(x, wt.t(), out=y))
profile_once(runs)
