"""Usage: sharedprof.py DTYPES: one launch each of the shared-weights kernel (256, 8, 4,
lead 2) and the wgmma kernel (128, 4, 4, lead 2) per weight type at 8B qkv, M = 4096,
between cudaProfilerStart/Stop (for ncu --profile-from-start off: sharedprof.sh)."""

import sys

import torch

from tilevm import dtypes
from tilevm.backend.launch import compiled_kernel
from tilevm.bench.ab import profile_once
from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.weights import quantize

M, N, K = 4096, 12288, 4096
runs = []
x = torch.randn(M, K, device="cuda", dtype=torch.float16)
w = torch.randn(K, N, device="cuda", dtype=torch.float16)
for wd in sys.argv[1].split(","):
    qw = quantize(w, wd, 128, format="fragments")
    wdtype = dtypes.parse(wd)
    for program in (qmm_wgmma_shared_kernel("f16").specialize(wdtype=wdtype, group_size=128),
                    qmm_wgmma_kernel("f16").specialize(wdtype=wdtype, group_size=128, bm=128,
                                                       num_warps=4, stages=4, lead=2)):
        kern = compiled_kernel(program)
        y = torch.empty(M, N, device="cuda", dtype=torch.float16)
        runs.append(lambda kern=kern, y=y, qw=qw: kern(x, qw.packed, qw.scales, qw.scales,
                                                       y, M, N, K))
profile_once(runs)
