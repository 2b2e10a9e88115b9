"""pgprof.py: one launch each of the one-tile-per-block matmul and the persistent one (grid =
SMs), 8B qkv and 70B o, M = 4096 (ncu --profile-from-start off)."""
import sys

import torch

sys.path.insert(0, "bench/results/qmm_h100_prefill_dequant")
from experiment_kernels import gemm_kernel, persistent_gemm_kernel  # noqa: E402

from tilevm.backend.launch import compiled_kernel  # noqa: E402
from tilevm.bench.ab import profile_once
from tilevm.bench.qmm import SHAPES  # noqa: E402

P = torch.cuda.get_device_properties(0).multi_processor_count
g = compiled_kernel(gemm_kernel("f16").specialize())
pg = compiled_kernel(persistent_gemm_kernel("f16").specialize())
runs = []
for shape in ("8b.qkv", "70b.o"):
    N, K = SHAPES[shape]
    M = 4096
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    runs.append(lambda x=x, wt=wt, y=y, M=M, N=N, K=K: g(x, wt, y, M, N, K))
    runs.append(lambda x=x, wt=wt, y=y, M=M, N=N, K=K: pg(x, wt, y, M, N, K, P))
profile_once(runs)
