"""prof.py DTYPE: one launch each of the shared-weights kernel as tuned (`base`) and with a
producer warpgroup (`p40`, producer.patch applied) on 8B qkv, M = 4096, between
cudaProfilerStart/Stop (for ncu --profile-from-start off; prof.sh)."""
import sys

import torch

from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import SHAPES
from tilevm.dtypes import parse
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.weights import quantize

wdtype = parse(sys.argv[1])
tuned = dict(wdtype=wdtype, group_size=128, prefetch=4, wide_stores=True)
kernels = [compiled_kernel(qmm_wgmma_shared_kernel("f16").specialize(**tuned, **kw))
           for kw in ({}, {"producer": 40})]
N, K = SHAPES["8b.qkv"]
M = 4096
x = torch.randn(M, K, device="cuda", dtype=torch.float16)
qw = quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), wdtype, 128,
              format="fragments")
y = torch.empty(M, N, device="cuda", dtype=torch.float16)
args = (x, qw.packed, qw.scales, qw.scales, y, M, N, K)
for kern in kernels:
    kern(*args)
torch.cuda.synchronize()
torch.cuda.profiler.start()
for kern in kernels:
    kern(*args)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
