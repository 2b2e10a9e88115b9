"""Experiment (issue 43): the pieces of a prepared call's host time. $OUT/exp_host.txt"""
import os, statistics, sys, time
import torch
import tilevm as tv
from tilevm.backend.cuda import driver
from tilevm.kernels import quantize, quantized_matmul
sys.path.insert(0, "examples")
from vector_add import vector_add
out = open(os.path.join(os.environ.get("OUT", "/tmp"), "exp_host.txt"), "w")
def say(*a):
    print(*a); print(*a, file=out); out.flush()
def per_call(fn, n=2000, batch=100):
    ts = []
    for _ in range(n // batch):
        torch.cuda._sleep(int(2e9 * 0.005))
        for _ in range(batch):
            t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
        torch.cuda.synchronize()
    return round(statistics.median(ts) * 1e6, 2)
add = tv.compile(vector_add, block=512)
n = 1 << 16
x = torch.randn(n, device="cuda"); y = torch.randn(n, device="cuda"); o = torch.empty_like(x)
add(x, y, o, n); torch.cuda.synchronize()
fast = add._fast
prepared = next(iter(fast.prepared.values()))
drv = driver.bindings()
ptrs = (x.data_ptr(), y.data_ptr(), o.data_ptr())
stream = torch._C._cuda_getCurrentRawStream(0)
say("empty lambda", per_call(lambda: None))
say("add(x, y, o, n)", per_call(lambda: add(x, y, o, n)))
say("fast.launch", per_call(lambda: fast.launch((x, y, o, n), None)))
say("prepared.submit", per_call(lambda: prepared.submit(stream, ptrs)))
say("prepared.launch", per_call(lambda: prepared.launch(stream, *ptrs)))
say("raw cuLaunchKernel", per_call(lambda: drv.cuLaunchKernel(prepared.function, *prepared.grid, *prepared.block, 0, stream, prepared._params[0], 0)))
say("cuCtxGetCurrent", per_call(lambda: drv.cuCtxGetCurrent()))
say("torch.cuda.is_initialized", per_call(lambda: torch.cuda.is_initialized()))
say("key tensors", per_call(lambda: [(a.dtype, a.numel(), a.get_device(), a.is_contiguous(), a.data_ptr()) for a in (x, y, o)]))
say("x.add_(0) torch op", per_call(lambda: x.add_(0)))
pdl = add.prepare(x, y, o, n, dependent=True)
say("prepared dependent (cuLaunchKernelEx)", per_call(lambda: pdl.submit(stream, ptrs)))
K, N = 4096, 12288
qw = quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), "int4", 128, format="fragments")
xq = torch.randn(1, K, device="cuda", dtype=torch.float16)
quantized_matmul(xq, qw); torch.cuda.synchronize()
say("quantized_matmul M=1", per_call(lambda: quantized_matmul(xq, qw)))
yq = torch.empty(1, N, device="cuda", dtype=torch.float16)
say("torch.empty(1,N)", per_call(lambda: torch.empty((1, N), dtype=torch.float16, device=xq.device)))
