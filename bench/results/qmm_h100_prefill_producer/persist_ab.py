"""persist_ab.py OUT SHAPES ROUNDS: the persistent matmul with a producer warp
(`persistent_producer.py`, 132 blocks, lead 2 and 3 of 4 stages) against the dequant
pair's matmul (`wt_matmul_kernel`, lead 2) and cuBLAS, M = 4096; outputs checked equal
(sums) and against float64 on ragged M and N."""
# ruff: noqa: B023, E402, E501, E702
import json
import sys

import torch

sys.path.insert(0, "bench/results/qmm_h100_prefill_producer")
from persistent_producer import persistent_producer_kernel

from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import SHAPES, Timer
from tilevm.kernels.qmm_dequant import wt_matmul_kernel

P = torch.cuda.get_device_properties(0).multi_processor_count
out, shapes, rounds = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
base = compiled_kernel(wt_matmul_kernel("f16").specialize(lead=2))
pk = persistent_producer_kernel("f16")
kernels = {"base": lambda x, wt, y, M, N, K: base(x, wt, y, M, N, K)}
for name, kw in {"pp2": dict(lead=2), "pp3": dict(lead=3), "pnoprod2": dict(lead=2, producer=False)}.items():
    kern = compiled_kernel(pk.specialize(**kw))
    kernels[name] = lambda x, wt, y, M, N, K, kern=kern: kern(x, wt, y, M, N, K, P)
for M, N, K in ((4000, 4000, 1024), (2000, 6000, 4096)):  # at least P tiles
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
    ref = x.double() @ wt.double().t()
    for name, kern in kernels.items():
        y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        kern(x, wt, y, M, N, K); torch.cuda.synchronize()
        err = float((y.double() - ref).abs().max())
        print(f"check {M}x{N}x{K} {name}: max err {err:.4f}", flush=True)
        assert err < 0.2, err
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
