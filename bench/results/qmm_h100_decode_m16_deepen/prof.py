"""prof.py: the tuned decode kernel at M = 1 and M = 16 on 70B gate_up for int3, int2
and int4 (f16, group 128), one launch each between cudaProfilerStart/Stop (for ncu
--profile-from-start off); run once without ncu first, so the schedules are tuned (and
printed) outside the profile."""
import torch

from tilevm.bench.ab import profile_once
from tilevm.bench.qmm import SHAPES
from tilevm.kernels.matmul import quantized_matmul, tuned_schedule
from tilevm.kernels.weights import quantize

N, K = SHAPES["70b.gate_up"]
torch.manual_seed(0)
w = torch.randn(K, N, device="cuda", dtype=torch.float16)
runs = []
for name in ("int3", "int2", "int4"):
    qw = quantize(w, name, 128, format="fragments")
    for M in (1, 16):
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        print(name, M, tuned_schedule(x, qw), flush=True)
        runs.append(lambda x=x, qw=qw: quantized_matmul(x, qw))
profile_once(runs)
