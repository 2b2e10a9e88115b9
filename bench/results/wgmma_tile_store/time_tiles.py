"""time_tiles.py OUT ROUNDS: `kernels_exp.wt_mm` (the dequant pair's f16 matmul) with its
tile of y stored directly, through padded rows (what landed in session 20) and through
the planner's swizzled tile (stmatrix), M = 4096, read flush, 50 runs a cell; each
variant checked against float64 on ragged shapes first."""
# ruff: noqa: B023, E702
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernels_exp as e  # noqa: E402

from tilevm.backend.launch import compiled_kernel  # noqa: E402
from tilevm.bench.qmm import SHAPES, Timer  # noqa: E402

VARIANTS = {"padded": dict(tile="padded"), "direct": dict(tile="direct"),
            "swizzled": dict(tile="swizzled")}
out, rounds = sys.argv[1], int(sys.argv[2])
kernels = {name: compiled_kernel(e.wt_mm.specialize(**kw)) for name, kw in VARIANTS.items()}
none = torch.zeros(1, device="cuda", dtype=torch.float32)
for M, N, K in ((300, 200, 96), (1000, 776, 4096 + 64), (4097, 1032, 512)):
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
    ref = x.double() @ wt.double().t()
    for name, kern in kernels.items():
        y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        kern(x, wt, y, none, M, N, K); torch.cuda.synchronize()
        err = float((y.double() - ref).abs().max())
        print(f"check {M}x{N}x{K} {name}: max err {err:.4f}", flush=True)
        assert err < 0.05 * max(1.0, float(ref.abs().max())) ** 0.5, err
timer = Timer(min_reps=50, l2_flush="read")
with open(out, "a") as f:
    for rnd in range(rounds):
        for shape in ("8b.qkv", "70b.qkv", "70b.o", "70b.gate_up", "70b.down"):
            N, K = SHAPES[shape]; M = 4096
            torch.manual_seed(0)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
            y = torch.empty(M, N, device="cuda", dtype=torch.float16)
            us, sums = {}, {}
            us["cublas"] = timer(lambda: torch.matmul(x, wt.t(), out=y))[0] * 1e6
            for name, kern in kernels.items():
                kern(x, wt, y, none, M, N, K); torch.cuda.synchronize()
                sums[name] = float(y.double().sum())
                us[name] = timer(lambda: kern(x, wt, y, none, M, N, K))[0] * 1e6
            row = {"round": rnd, "shape": shape, "us": us, "sums": sums}
            print(json.dumps({"shape": shape, **{k: round(v / us["padded"], 3)
                                                 for k, v in us.items()}}), flush=True)
            f.write(json.dumps(row) + "\n")
