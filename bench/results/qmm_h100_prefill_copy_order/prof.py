"""prof.py PREFETCH DTYPES: one launch each of the shared-weights kernel (256 rows, 8 warps, 4
stages, x 2 k-tiles ahead) with the codes PREFETCH k-tiles ahead per weight type, 8B qkv,
M = 4096, between cudaProfilerStart/Stop (for ncu --profile-from-start off: prof.sh)."""

import sys

import torch

from tilevm import dtypes
from tilevm.backend.launch import compiled_kernel
from tilevm.bench.ab import profile_once
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.weights import quantize

M, N, K = 4096, 12288, 4096
runs = []
x = torch.randn(M, K, device="cuda", dtype=torch.float16)
w = torch.randn(K, N, device="cuda", dtype=torch.float16)
for wd in sys.argv[2].split(","):
    qw = quantize(w, wd, 128, format="fragments")
    program = qmm_wgmma_shared_kernel("f16").specialize(
        wdtype=dtypes.parse(wd), group_size=128, prefetch=int(sys.argv[1]))
    kern = compiled_kernel(program)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    runs.append(lambda kern=kern, y=y, qw=qw: kern(x, qw.packed, qw.scales, qw.scales,
                                                   y, M, N, K))
profile_once(runs)
