"""methods.py OUT: the same kernels timed by both Timer methods (do_bench, and CUDA events
behind a GPU sleep) in one process, two rounds in opposite orders: 8B qkv at M = 4096,
cuBLAS f16 and tilevm int4 / int3 (shared-weights kernel, tuned tiling)."""
import json
import sys

import torch
from triton.testing import do_bench

from tilevm import dtypes
from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import Timer
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.weights import quantize

M, N, K = 4096, 12288, 4096
torch.manual_seed(0)
w = torch.randn(K, N, device="cuda", dtype=torch.float16)
x = torch.randn(M, K, device="cuda", dtype=torch.float16)
y = torch.empty(M, N, device="cuda", dtype=torch.float16)
fns = {"cublas": lambda: torch.matmul(x, w)}
for wd in ("int4", "int3"):
    qw = quantize(w, wd, 128, format="fragments")
    kern = compiled_kernel(qmm_wgmma_shared_kernel("f16").specialize(
        wdtype=dtypes.parse(wd), group_size=128, prefetch=4))
    fns[wd] = lambda kern=kern, qw=qw: kern(x, qw.packed, qw.scales, qw.scales, y, M, N, K)
timer = Timer(min_reps=100)
rows = []
for rnd, order in enumerate((list(fns), list(fns)[::-1])):
    for name in order:
        fn = fns[name]
        est, host = timer._estimate(fn)
        rep_ms = max(100.0, 1.1 * 100 * est * 1e3)
        t_do = do_bench(fn, warmup=25, rep=rep_ms, return_mode="median") / 1e3
        t_ev = timer._events(fn, est, host)[0]
        row = dict(round=rnd, kernel=name, host_us=round(host * 1e6, 1),
                   do_bench_us=round(t_do * 1e6, 1), events_us=round(t_ev * 1e6, 1))
        print(json.dumps(row), flush=True)
        rows.append(row)
json.dump(rows, open(sys.argv[1], "w"), indent=1)
