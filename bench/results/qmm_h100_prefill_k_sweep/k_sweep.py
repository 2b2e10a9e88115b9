"""k_sweep.py OUT: the shared-weights kernel (tuned tiling, as `kernels.matmul` runs it)
for int8, f6e3m2, int4 and int3, the pair's f16 matmul (`wt_matmul`) and cuBLAS at
M = 4096, N = 12288 (8B qkv), K from 1024 to 16384, read flush, 50 runs a cell, 2
rounds: time = fixed + slope * K, fitted per kernel, says whether what a type pays over
cuBLAS is paid per tile (prologue: the first codes' loads and conversion; epilogue) or
per k-tile (the main loop)."""
# ruff: noqa: B023, E702
import json
import sys

import torch

from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import Timer
from tilevm.dtypes import parse
from tilevm.kernels.qmm_dequant import wt_matmul_kernel
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.weights import quantize

TYPES = ("int8", "f6e3m2", "int4", "int3")
mm = compiled_kernel(wt_matmul_kernel("f16").specialize(wide_stores=True))
shared = {t: compiled_kernel(qmm_wgmma_shared_kernel("f16").specialize(
    wdtype=parse(t), group_size=128, wide_stores=True, prefetch=4)) for t in TYPES}
timer = Timer(min_reps=50, l2_flush="read")
M, N = 4096, 12288
with open(sys.argv[1], "a") as f:
    for rnd in range(2):
        for K in (1024, 2048, 4096, 8192, 16384):
            torch.manual_seed(0)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            w = torch.randn(K, N, device="cuda", dtype=torch.float16)
            wt = w.t().contiguous()
            y = torch.empty(M, N, device="cuda", dtype=torch.float16)
            us = {"cublas": timer(lambda: torch.matmul(x, wt.t(), out=y))[0] * 1e6,
                  "f16": timer(lambda: mm(x, wt, y, M, N, K))[0] * 1e6}
            for t, kern in shared.items():
                qw = quantize(w, parse(t), 128, format="fragments")
                kern(x, qw.packed, qw.scales, qw.scales, y, M, N, K); torch.cuda.synchronize()
                ref = x.float() @ qw.dequantize().float()
                err = float((y.float() - ref).abs().max() / ref.abs().max())
                assert err < 1e-2, (t, K, err)
                us[t] = timer(lambda: kern(x, qw.packed, qw.scales, qw.scales, y, M, N, K))[0] \
                    * 1e6
            row = {"round": rnd, "M": M, "N": N, "K": K, "us": {k: round(v, 2) for k, v in
                                                               us.items()}}
            print(json.dumps(row), flush=True)
            f.write(json.dumps(row) + "\n")
