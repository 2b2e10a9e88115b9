"""dequant_ab.py OUT SHAPES DTYPES: prefill (M=4096) as dequant pass + f16 GEMM against the
shared-weights kernel and cuBLAS (bench Timer, write flush, 50 runs, 2 rounds)."""
# ruff: noqa: B023, E501, E702, E731
import json
import sys

sys.path.insert(0, "bench/results/qmm_h100_prefill_dequant")
import torch
from experiment_kernels import dequant_kernel, gemm_kernel

from tilevm import dtypes
from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import SHAPES, Timer
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.weights import quantize

timer = Timer(min_reps=50, l2_flush="write")
M = 4096
out = open(sys.argv[1], "a")
gemm = compiled_kernel(gemm_kernel("f16").specialize())
for rnd in range(2):
  for shape in sys.argv[2].split(","):
    N, K = SHAPES[shape]
    torch.manual_seed(0)
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    y2 = torch.empty(M, N, device="cuda", dtype=torch.float16)
    us = {}
    us["cublas"] = timer(lambda: torch.matmul(x, w, out=y2))[0] * 1e6
    for name in sys.argv[3].split(","):
        wd = dtypes.parse(name)
        qw = quantize(w, wd, 128, format="fragments")
        Np = qw.scales.shape[1]
        wt = torch.empty(Np, K, device="cuda", dtype=torch.float16)
        ss = compiled_kernel(qmm_wgmma_shared_kernel("f16").specialize(wdtype=wd, group_size=128, prefetch=4))
        dq = compiled_kernel(dequant_kernel("f16").specialize(wdtype=wd, group_size=128))
        dqs = compiled_kernel(dequant_kernel("f16").specialize(wdtype=wd, group_size=128, via_shared=True))
        run_ss = lambda: ss(x, qw.packed, qw.scales, qw.scales, y, M, N, K)
        run_dq = lambda: dq(qw.packed, qw.scales, wt, N, K)
        run_dqs = lambda: dqs(qw.packed, qw.scales, wt, N, K)
        run_gemm = lambda: gemm(x, wt, y2, M, N, K)
        run_ss(); run_dqs(); run_gemm(); torch.cuda.synchronize()
        same = bool(torch.equal(y, y2))
        ref_wt = qw.dequantize().to(torch.float16).t()
        dq_ok = bool(torch.equal(wt[:N], ref_wt))
        us[name] = {"shared": timer(run_ss)[0] * 1e6, "dq": timer(run_dq)[0] * 1e6,
                    "dq_shared": timer(run_dqs)[0] * 1e6, "gemm": timer(run_gemm)[0] * 1e6,
                    "dq+gemm": timer(lambda: (run_dqs(), run_gemm()))[0] * 1e6,
                    "same_y": same, "dq_exact": dq_ok}
    row = {"round": rnd, "shape": shape, "us": us}
    print(json.dumps(row), flush=True); out.write(json.dumps(row) + "\n")
