"""one.py VARIANT [P]: one launch of a persistent matmul variant (4096 x 2048 x 512),
its max error against float64 (the launch that faulted before the empty-group rule)."""
# ruff: noqa: E402, E702
import sys

import torch

sys.path.insert(0, "bench/results/qmm_h100_prefill_producer")
from persistent_producer import persistent_producer_kernel

from tilevm.backend.launch import compiled_kernel

name = sys.argv[1]
kw = {"pp2": dict(lead=2), "pp3": dict(lead=3), "np2": dict(lead=2, producer=False)}[name]
kern = compiled_kernel(persistent_producer_kernel("f16").specialize(**kw))
M, N, K = 4096, 2048, 512
P = int(sys.argv[2]) if len(sys.argv) > 2 else 132
x = torch.randn(M, K, device="cuda", dtype=torch.float16)
wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
kern(x, wt, y, M, N, K, P); torch.cuda.synchronize()
print(name, P, float((y.double() - x.double() @ wt.double().t()).abs().max()))
