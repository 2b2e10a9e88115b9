"""prof.py DTYPES: one launch each of the shared-weights kernel (tuned tiling) per type, 8B qkv, M=4096."""
import sys
import torch
from tilevm import dtypes
from tilevm.backend.launch import compiled_kernel
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.weights import quantize
M, N, K = 4096, 12288, 4096
runs = []
x = torch.randn(M, K, device="cuda", dtype=torch.float16)
w = torch.randn(K, N, device="cuda", dtype=torch.float16)
for wd in sys.argv[1].split(","):
    qw = quantize(w, wd, 128, format="fragments")
    prog = qmm_wgmma_shared_kernel("f16").specialize(wdtype=dtypes.parse(wd), group_size=128, prefetch=4)
    kern = compiled_kernel(prog)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    runs.append(lambda kern=kern, y=y, qw=qw: kern(x, qw.packed, qw.scales, qw.scales, y, M, N, K))
for r in runs:
    r(); r()
torch.cuda.synchronize()
torch.cuda.profiler.start()
for r in runs:
    r()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
