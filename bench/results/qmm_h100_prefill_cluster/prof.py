"""prof.py VARIANT,...: one launch of each `cluster_ab.py` variant on 8B qkv, M = 4096,
between cudaProfilerStart/Stop (for ncu --profile-from-start off)."""
# ruff: noqa: E402
import sys

import torch

sys.argv = [sys.argv[0], "/dev/null", "8b.qkv", "0", sys.argv[1]]
sys.path.insert(0, "bench/results/qmm_h100_prefill_cluster")
import cluster_ab  # noqa: F401  (compiles and checks the variants; rounds 0: no timing)

from tilevm.bench.qmm import SHAPES

N, K = SHAPES["8b.qkv"]
M = 4096
x = torch.randn(M, K, device="cuda", dtype=torch.float16)
wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
y = torch.empty(M, N, device="cuda", dtype=torch.float16)
for kern in cluster_ab.kernels.values():
    kern(x, wt, y, M, N, K)
torch.cuda.synchronize()
torch.cuda.profiler.start()
for kern in cluster_ab.kernels.values():
    kern(x, wt, y, M, N, K)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
