"""debug4.py: which forms of the persistent matmul (`pp3.py`) are wrong with a producer
warpgroup (setmaxnreg): its own epilogue tile or the direct store, 3 or 4 stages
(session 22)."""
# ruff: noqa: E402, E501, E702
import sys

import torch

sys.path.insert(0, "bench/results/qmm_h100_prefill_persistent_wg")
from pp3 import persistent_kernel

from tilevm.backend.launch import compiled_kernel

P = 132
for regs in (None, 40):
    for kw in (dict(direct=True, stages=4), dict(direct=True, stages=3), dict(direct=False, stages=3), dict(direct=False, stages=4, bk=32)):
        kern = compiled_kernel(persistent_kernel("f16", regs).specialize(**kw))
        for M, N, K in ((256, 128, 768), (4000, 4000, 1536)):
            torch.manual_seed(0)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
            ref = x.double() @ wt.double().t()
            y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
            kern(x, wt, y, M, N, K, P); torch.cuda.synchronize()
            bad = ((y.double() - ref).abs() > 0.5) | y.isnan()
            print(f"registers={regs} {kw} {M}x{N}x{K}: bad {int(bad.sum())} of {bad.numel()}", flush=True)
