"""ncu target: the register-A kernel (half atoms 64 x 64, codes 4 ahead) on 8B qkv at
M = 64, three launches (with EXP_PRODUCER=1 and bench/exp_cluster_diag.patch: the same
schedule with a producer warp)."""
import torch

from tilevm.kernels import matmul as mm
from tilevm.kernels import quantize
from tilevm.kernels.schedule import wgmma

N, K, M = 12288, 4096, 64
qw = quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), "int4", 128,
              format="fragments")
x = torch.randn(M, K, device="cuda", dtype=torch.float16)
y = torch.empty(M, N, device="cuda", dtype=torch.float16)
s = wgmma(64, 4, 4, 128, lead=2, prefetch=4, half_atoms=True)
mm._prebuild(qw, [s], N)
stream = torch.cuda.current_stream().cuda_stream
plan = mm._plan(x, qw, y, s, stream, (M, N))
for _ in range(3):
    mm._run(plan, x.data_ptr(), stream, y)
torch.cuda.synchronize()
print(torch.cuda.get_device_properties(0).L2_cache_size)
