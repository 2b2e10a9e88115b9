"""k_sweep.py OUT: the pair's f16 matmul (`wt_matmul`, wide stores, as `kernels.matmul`
runs it) and cuBLAS at M = 4096, N = 12288 (8B qkv) and N = 8192 (70B o), K from 1024 to
16384, read flush, 50 runs a cell, 2 rounds: time = fixed + per k-tile, fitted per N,
says whether the gap to cuBLAS is per tile (prologue, epilogue) or per k-tile (the main
loop)."""
# ruff: noqa: B023, E702
import json
import sys

import torch

from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import Timer
from tilevm.kernels.qmm_dequant import wt_matmul_kernel

mm = compiled_kernel(wt_matmul_kernel("f16").specialize(wide_stores=True))
timer = Timer(min_reps=50, l2_flush="read")
M = 4096
with open(sys.argv[1], "a") as f:
    for rnd in range(2):
        for N in (12288, 8192):
            for K in (1024, 2048, 4096, 8192, 16384):
                torch.manual_seed(0)
                x = torch.randn(M, K, device="cuda", dtype=torch.float16)
                wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
                y = torch.empty(M, N, device="cuda", dtype=torch.float16)
                mm(x, wt, y, M, N, K); torch.cuda.synchronize()
                ref = torch.matmul(x, wt.t())
                assert (y.float() - ref.float()).abs().max() < 0.5, (N, K)
                us = {"cublas": timer(lambda: torch.matmul(x, wt.t(), out=y))[0] * 1e6,
                      "tilevm": timer(lambda: mm(x, wt, y, M, N, K))[0] * 1e6}
                row = {"round": rnd, "M": M, "N": N, "K": K, "us": us}
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")
