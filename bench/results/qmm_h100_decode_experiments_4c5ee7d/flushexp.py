# usage: flushexp.py OUT.jsonl -> int4 M=1 (default schedule) and cuBLAS f16 under 4 L2 regimes
import json
import math
import statistics
import sys

import torch

from tilevm.kernels.matmul import quantized_matmul
from tilevm.kernels.weights import quantize

out = open(sys.argv[1], "a")
FLUSH = 256 << 20
buf = torch.empty(FLUSH // 4, dtype=torch.int32, device="cuda")


def wflush():
    buf.zero_()


def rflush():
    buf.sum()


def timed(fns, pre, reps=200):
    for f in fns[:3]:
        f()
    for i in range(20):
        pre()
        fns[i % len(fns)]()
    st = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    en = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        torch.cuda._sleep(int(600e-6 * 2e9))
        pre()
        st[i].record()
        fns[i % len(fns)]()
        en[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(st, en)) * 1e3


for name, N, K in [
    ("8b.qkv", 12288, 4096),
    ("70b.o", 8192, 8192),
    ("70b.qkv", 10240, 8192),
    ("70b.gate_up", 57344, 8192),
]:
    torch.manual_seed(0)
    x = torch.randn(1, K, device="cuda", dtype=torch.float16)
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    qw = quantize(w, "int4", 128, format="fragments")
    qbytes = N * K // 2
    ncopy = max(2, math.ceil(200e6 / qbytes) + 1)

    qws = [qw] + [qw.to("cuda") if False else None for _ in range(ncopy - 1)]
    # rotate: independent copies of the packed data
    import dataclasses

    def clone(q):
        fields = (
            {
                f.name: (
                    getattr(q, f.name).clone()
                    if torch.is_tensor(getattr(q, f.name))
                    else getattr(q, f.name)
                )
                for f in dataclasses.fields(q)
            }
            if dataclasses.is_dataclass(q)
            else None
        )
        return dataclasses.replace(q, **{k: v for k, v in fields.items() if torch.is_tensor(v)})

    try:
        qws = [qw] + [clone(qw) for _ in range(ncopy - 1)]
    except Exception as e:
        print("no clone", type(qw), e)
        qws = [qw]
    tl = [lambda q=q, x=x: quantized_matmul(x, q, tune=False) for q in qws]
    tt = [lambda q=q, x=x: quantized_matmul(x, q, tune=True) for q in qws]
    rd = [lambda q=q: q.packed.view(torch.int32).sum() for q in qws]
    wh = [w] + [w.clone() for _ in range(max(2, math.ceil(200e6 / (2 * N * K)) + 1) - 1)]
    cb = [lambda b=b, x=x: torch.matmul(x, b) for b in wh]
    for be, fns in (("tilevm", tl), ("tilevm_tuned", tt), ("read_packed", rd), ("cublas", cb)):
        rec = dict(shape=name, backend=be, copies=len(fns))
        rec["write_flush"] = timed(fns[:1], wflush)
        rec["read_flush"] = timed(fns[:1], rflush)
        rec["rotate"] = timed(fns, lambda: None)
        rec["hot"] = timed(fns[:1], lambda: None)
        print(json.dumps(rec), flush=True)
        out.write(json.dumps(rec) + "\n")
    del wh, qws, tl, cb, tt, rd
    torch.cuda.empty_cache()
