"""prefetch_ab.py SHAPES DTYPES: k-tiles of codes in flight (prefetch 1..3) in the prefill
kernels (M=4096, read flush, two interleaved rounds)."""

import json
import os
import sys

import torch

from tilevm import dtypes
from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import Timer
from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.weights import quantize

SHAPES = {
    "8b.qkv": (12288, 4096),
    "70b.qkv": (10240, 8192),
    "70b.o": (8192, 8192),
    "70b.gate_up": (57344, 8192),
    "70b.down": (8192, 28672),
}
PLAN = {
    "int4": [
        ("ss", 1),
        ("ss", 2),
        ("ss", 3),
        ("wg4.4.2", 1),
        ("wg4.4.2", 2),
        ("wg4.4.2", 3),
        ("wg8.4.2", 1),
        ("wg8.4.2", 2),
        ("wg4.2.0", 1),
    ],
    "int3": [("ss", 1), ("ss", 3), ("wg4.4.2", 1), ("wg4.4.2", 2), ("wg4.2.0", 1)],
    "f6e3m2": [("ss", 1), ("ss", 3), ("wg4.4.2", 1), ("wg4.4.2", 2), ("wg4.2.0", 1)],
    "int8": [("ss", 1), ("ss", 3), ("wg4.4.2", 1), ("wg4.2.0", 1)],
}
M = 4096
timer = Timer(min_reps=30, l2_flush="read")
out = open(os.environ.get("OUTF", "/dev/null"), "a")
for sh in sys.argv[1].split(","):
    N, K = SHAPES[sh]
    torch.manual_seed(0)
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    cublas = timer(lambda x=x, w=w: x @ w)[0] * 1e6
    for wd in sys.argv[2].split(","):
        dt = dtypes.parse(wd)
        qw = quantize(w, wd, 128, format="fragments")
        compiled = {}
        for kern, pf in PLAN[wd]:
            if kern == "ss":
                p = qmm_wgmma_shared_kernel("f16").specialize(
                    wdtype=dt, group_size=128, prefetch=pf
                )
            else:
                nw, st, lead = map(int, kern[2:].split("."))
                p = qmm_wgmma_kernel("f16").specialize(
                    wdtype=dt,
                    group_size=128,
                    bm=128,
                    num_warps=nw,
                    stages=st,
                    lead=lead,
                    prefetch=pf,
                )
            compiled[f"{kern}.pf{pf}"] = compiled_kernel(p)
        res, ys = {n: [] for n in compiled}, {}
        y = torch.empty(M, N, device="cuda", dtype=torch.float16)
        args = (x, qw.packed, qw.scales, qw.scales, y, M, N, K)
        for rnd in range(2):
            for n in list(compiled) if rnd == 0 else list(reversed(compiled)):
                kern = compiled[n]
                kern(*args)
                torch.cuda.synchronize()
                if rnd == 0:
                    ys[n] = y.clone()
                res[n].append(round(timer(lambda kern=kern, args=args: kern(*args))[0] * 1e6, 1))
        same = {n: bool(torch.equal(ys[n], ys[n.rsplit(".pf", 1)[0] + ".pf1"])) for n in ys}
        line = dict(
            shape=sh,
            dtype=wd,
            cublas=round(cublas, 1),
            us={n: min(v) for n, v in res.items()},
            rounds=res,
            same=same,
        )
        print(json.dumps(line), flush=True)
        out.write(json.dumps(line) + "\n")
