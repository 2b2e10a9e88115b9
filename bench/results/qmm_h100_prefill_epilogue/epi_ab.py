"""epi_ab.py OUT SHAPES ROUNDS [VARIANTS_JSON]: the dequant pair's f16 matmul
(`wt_matmul_kernel`) with its tile of y stored through shared memory (16-byte stores)
against the direct store (2-byte stores of the mma fragments), and cuBLAS, at M = 4096;
outputs checked equal (sums) and against float64 on ragged shapes."""
# ruff: noqa: B023, E501, E702
import json
import sys

import torch

from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import SHAPES, Timer
from tilevm.kernels.qmm_dequant import wt_matmul_kernel

VARIANTS = {"base": dict(lead=2), "wide": dict(lead=2, wide_stores=True)}
out, shapes, rounds = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
if len(sys.argv) > 4:
    VARIANTS = json.loads(sys.argv[4])
k = wt_matmul_kernel("f16")
kernels = {name: compiled_kernel(k.specialize(**kw)) for name, kw in VARIANTS.items()}
for M, N, K in ((300, 200, 96), (1000, 776, 4096 + 64), (4097, 1032, 512)):
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
    ref = (x.double() @ wt.double().t())
    for name, kern in kernels.items():
        y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        kern(x, wt, y, M, N, K); torch.cuda.synchronize()
        err = float((y.double() - ref).abs().max())
        print(f"check {M}x{N}x{K} {name}: max err {err:.4f}", flush=True)
        assert err < 0.05 * max(1.0, float(ref.abs().max())) ** 0.5, err
timer = Timer(min_reps=50, l2_flush="read")
with open(out, "a") as f:
    for rnd in range(rounds):
        for shape in shapes:
            N, K = SHAPES[shape]; M = 4096
            torch.manual_seed(0)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
            y = torch.empty(M, N, device="cuda", dtype=torch.float16)
            us, sums = {}, {}
            us["cublas"] = timer(lambda: torch.matmul(x, wt.t(), out=y))[0] * 1e6
            for name, kern in kernels.items():
                kern(x, wt, y, M, N, K); torch.cuda.synchronize()
                sums[name] = float(y.double().sum())
                us[name] = timer(lambda: kern(x, wt, y, M, N, K))[0] * 1e6
            row = {"round": rnd, "shape": shape, "us": us, "sums": sums}
            print(json.dumps({"shape": shape, **{k: round(v / us["base"], 3) for k, v in us.items()}}), flush=True)
            f.write(json.dumps(row) + "\n")
