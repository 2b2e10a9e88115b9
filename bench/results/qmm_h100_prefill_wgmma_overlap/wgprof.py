"""Usage: wgprof.py DTYPE "bm,warps,stages[,lead];..." [cublas]: one launch of each
qmm_wgmma tiling (and of cuBLAS f16) at 8B qkv, M = 4096, between
cudaProfilerStart/Stop (for ncu --profile-from-start off: prof4.sh)."""

import sys

import torch

from tilevm import dtypes
from tilevm.backend.launch import compiled_kernel
from tilevm.bench.ab import profile_once
from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
from tilevm.kernels.weights import quantize

wd = sys.argv[1]
M, N, K = 4096, 12288, 4096
w = torch.randn(K, N, device="cuda", dtype=torch.float16)
qw = quantize(w, wd, 128, format="fragments")
x = torch.randn(M, K, device="cuda", dtype=torch.float16)
wf = qw.dequantize()
wf = (wf if isinstance(wf, torch.Tensor) else torch.from_numpy(wf)).cuda().half()
runs = []
for cfg in sys.argv[2].split(";"):
    bm, warps, stages, *lead = map(int, cfg.split(","))
    program = qmm_wgmma_kernel("f16").specialize(
        wdtype=dtypes.parse(wd), group_size=128, has_zeros=False, bm=bm, bk=64,
        num_warps=warps, stages=stages, lead=lead[0] if lead else 0)
    kern = compiled_kernel(program)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    runs.append(lambda kern=kern, y=y: kern(x, qw.packed, qw.scales, qw.scales, y, M, N, K))
if len(sys.argv) > 3:
    runs.append(lambda: x @ wf)
profile_once(runs)
