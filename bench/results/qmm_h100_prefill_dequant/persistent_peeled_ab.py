"""persistent_peeled_ab.py OUT SHAPES: the persistent matmuls (pgemm1: persistent_gemm_kernel, pgemm2: persistent3_gemm_kernel, peeled) against one tile a block
and cuBLAS (read flush, 50 runs, 2 rounds)."""
# ruff: noqa: B023, E501, E702
import json
import sys

sys.path.insert(0, "bench/results/qmm_h100_prefill_dequant")
import torch
from experiment_kernels import gemm_kernel, persistent3_gemm_kernel, persistent_gemm_kernel

from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import SHAPES, Timer

timer = Timer(min_reps=50, l2_flush="read")
P = torch.cuda.get_device_properties(0).multi_processor_count
g = compiled_kernel(gemm_kernel("f16").specialize())
pg = {"1": compiled_kernel(persistent_gemm_kernel("f16").specialize()), "2": compiled_kernel(persistent3_gemm_kernel("f16").specialize())}
with open(sys.argv[1] + "/pgemm2.jsonl", "a") as f:
    for rnd in range(2):
        for shape in sys.argv[2].split(","):
            N, K = SHAPES[shape]; M = 4096
            torch.manual_seed(0)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
            y = torch.empty(M, N, device="cuda", dtype=torch.float16)
            us, sums = {}, {}
            us["cublas"] = timer(lambda: torch.matmul(x, wt.t(), out=y))[0] * 1e6
            runs = {"gemm": lambda: g(x, wt, y, M, N, K)}
            for gm, k in pg.items():
                runs[f"pgemm{gm}"] = lambda k=k: k(x, wt, y, M, N, K, P)
            for name, run in runs.items():
                y.zero_(); run(); torch.cuda.synchronize(); sums[name] = float(y.double().sum())
                us[name] = timer(run)[0] * 1e6
            row = {"round": rnd, "shape": shape, "us": us, "sums": sums}
            print(json.dumps(row), flush=True); f.write(json.dumps(row) + "\n")
