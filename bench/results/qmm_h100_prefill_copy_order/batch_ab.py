"""batch_ab.py INFLIGHT OUT SHAPES DTYPES: the shared-weights kernel with its codes three
k-tiles ahead, fetched one per k-tile, or a loop iteration (four) at a time. The run used
an experimental flag (`batch=True` with `prefetch=3`), committed as `prefetch=4` (=
stages): the same program."""

# ruff: noqa: E402, E401, E702, E731, B023

import json
import sys

import tilevm.backend.lowering.wgmma_waits as ww

ww.IN_FLIGHT_AFTER_DOT = int(sys.argv[1])
import torch

from tilevm import dtypes
from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import Timer
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
f16 = dtypes.parse("f16")
with open(sys.argv[2], "a") as f:
    for sh in sys.argv[3].split(","):
        N, K = SHAPES[sh]
        torch.manual_seed(0)
        w = torch.randn(K, N, device="cuda", dtype=torch.float16)
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        for wd in sys.argv[4].split(","):
            dt = dtypes.parse(wd)
            qw = quantize(w, wd, 128, format="fragments")
            ss = qmm_wgmma_shared_kernel("f16")
            progs = {
                "pf3": ss.specialize(wdtype=dt, group_size=128, prefetch=3),
                "batch": ss.specialize(wdtype=dt, group_size=128, prefetch=4),
            }
            res, sums = {}, {}
            y = torch.empty(M, N, device="cuda", dtype=torch.float16)
            args = (x, qw.packed, qw.scales, qw.scales, y, M, N, K)
            for name, prog in progs.items():
                kern = compiled_kernel(prog)
                y.zero_()
                kern(*args)
                torch.cuda.synchronize()
                sums[name] = float(y.double().sum())
                res[name] = round(timer(lambda: kern(*args))[0] * 1e6, 1)
            row = dict(inflight=ww.IN_FLIGHT_AFTER_DOT, shape=sh, dtype=wd, us=res, sums=sums)
            print(json.dumps(row), flush=True)
            f.write(json.dumps(row) + "\n")
