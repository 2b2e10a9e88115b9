# (needs ring_kernel.patch applied: it subclasses its kernels.qmm.SplitK)
# usage: floor.py OUT.jsonl -> what reading the weights costs under the bench's read flush: torch
# sum/copy of the packed bytes, the tuned kernel, and the tuned kernel without its split-K reduction
# (timing only), M=1
import json
import sys

import torch

import tilevm.kernels.qmm as q
from tilevm.bench.qmm import Timer
from tilevm.kernels import matmul
from tilevm.kernels.matmul import quantized_matmul, tuned_schedule
from tilevm.kernels.weights import quantize


# NoSum parks the partial sums and counts in, never adds them up (y stays as it was)
class NoSum(q.SplitK):
    def __init__(self, *a):
        super().__init__(*a)
        self.arrived = -1

class NoCount(q.SplitK):  # parks the partial sums only
    def __init__(self, *a):
        saved, q.tv.atomic_add = q.tv.atomic_add, lambda *args, **kw: -1
        try:
            super().__init__(*a)
        finally:
            q.tv.atomic_add = saved

timer = Timer(min_reps=100, l2_flush="read")
f = open(sys.argv[1], "a")
small = torch.empty(256, device="cuda")


def t(fn):
    return round(timer(fn)[0] * 1e6, 2)


print(json.dumps(dict(floor_zero=t(lambda: small.zero_()))), flush=True)
for N, K in ((12288, 4096), (8192, 8192), (10240, 8192), (57344, 8192)):
    torch.manual_seed(0)
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    x = torch.randn(1, K, device="cuda", dtype=torch.float16)
    rec = dict(N=N, K=K, cublas=t(lambda x=x, w=w: x @ w))
    for wd in ("int4", "int2", "int8"):
        qw = quantize(w, wd, 128, format="fragments")
        s = tuned_schedule(x, qw)
        words = qw.packed.view(torch.int32)
        dst = torch.empty_like(qw.packed)
        r = dict(sched=str(s),
                 kernel=t(lambda x=x, qw=qw, s=s: quantized_matmul(x, qw, schedule=s)),
                 sum=t(lambda words=words: words.sum(dtype=torch.int64)),
                 copy=t(lambda dst=dst, qw=qw: dst.copy_(qw.packed)),
                 bytes=qw.packed.numel() + qw.scales.numel() * 2)
        if s.split_k > 1:
            saved = q.SplitK
            for name, cls in (("no_sum", NoSum), ("no_count", NoCount)):
                q.SplitK = cls
                matmul._kernels.clear()
                r[name] = t(lambda x=x, qw=qw, s=s: quantized_matmul(x, qw, schedule=s))
            q.SplitK = saved
            matmul._kernels.clear()
        rec[wd] = r
    print(json.dumps(rec), flush=True)
    f.write(json.dumps(rec) + "\n")
