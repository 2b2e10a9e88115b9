# usage: coldfirst.py DTYPE M N K -> wall time of a first tuned call in a fresh process with an
# empty kernel cache
import sys
import time

import torch

from tilevm.kernels.matmul import quantized_matmul, tuned_schedule
from tilevm.kernels.schedule import candidates
from tilevm.kernels.weights import quantize

wd, M, N, K = sys.argv[1], *map(int, sys.argv[2:])
w = torch.randn(K, N, device="cuda", dtype=torch.float16)
x = torch.randn(M, K, device="cuda", dtype=torch.float16)
qw = quantize(w, wd, 128, format="fragments")
torch.cuda.synchronize()
t = time.perf_counter()
quantized_matmul(x, qw)
torch.cuda.synchronize()
first = time.perf_counter() - t
t = time.perf_counter()
quantized_matmul(x, qw)
torch.cuda.synchronize()
second = time.perf_counter() - t
print(f"cold first call {wd} M={M} N={N} K={K}: {first:.2f} s "
      f"({len(candidates(M, N, K, 128, hopper=True, bits=qw.dtype.bits))} candidates), "
      f"then {second*1e3:.2f} ms, {tuned_schedule(x, qw)}")
