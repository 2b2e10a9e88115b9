"""caab.py SHAPES DTYPES: codes loaded 1 or 2 k-tiles ahead of their conversion, in the
shared-weights kernel and two wgmma tilings (M=4096, read flush, two interleaved rounds)."""

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
        kerns = {}
        for ca in (1, 2):
            kerns[f"ss.ca{ca}"] = qmm_wgmma_shared_kernel("f16").specialize(
                wdtype=dt, group_size=128, codes_ahead=ca
            )
            for c in ((128, 4, 2, 0), (128, 4, 4, 2)):
                if ca == 2 and wd == "int8" and c[2] == 4:
                    continue  # spills
                kerns[f"wg{c[2]}.{c[3]}.ca{ca}"] = qmm_wgmma_kernel("f16").specialize(
                    wdtype=dt,
                    group_size=128,
                    bm=c[0],
                    num_warps=c[1],
                    stages=c[2],
                    lead=c[3],
                    codes_ahead=ca,
                )
        compiled = {n: compiled_kernel(p) for n, p in kerns.items()}
        res, ys = {n: [] for n in kerns}, {}
        y = torch.empty(M, N, device="cuda", dtype=torch.float16)
        args = (x, qw.packed, qw.scales, qw.scales, y, M, N, K)
        for rnd in range(2):
            names = list(compiled) if rnd == 0 else list(reversed(compiled))
            for n in names:
                kern = compiled[n]
                kern(*args)
                torch.cuda.synchronize()
                if rnd == 0:
                    ys[n] = y.clone()
                res[n].append(round(timer(lambda kern=kern, args=args: kern(*args))[0] * 1e6, 1))
        same = {n: bool(torch.equal(ys[n], ys[n.replace("ca2", "ca1")])) for n in ys if "ca2" in n}
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
