"""pp_ab.py OUT SHAPES ROUNDS [VARIANT,...]: the persistent matmul with a producer warp(group)
(`pp3.py`: 3 stages, the wide epilogue through a tile of its own) against the dequant
pair's matmul as the tuner runs it (`wt_matmul_kernel`, lead 2 of 4 stages, wide
stores) and cuBLAS, M = 4096, f16, L2 read flush; outputs checked against float64 on
ragged shapes first and equal (sums) on each timed shape."""
# ruff: noqa: B023, E402, E501, E702
import json
import sys

import torch

sys.path.insert(0, "bench/results/qmm_h100_prefill_persistent_wg")
from pp3 import persistent_kernel

from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import SHAPES, Timer
from tilevm.kernels.qmm_dequant import wt_matmul_kernel

P = torch.cuda.get_device_properties(0).multi_processor_count
out, shapes, rounds = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
base = compiled_kernel(wt_matmul_kernel("f16").specialize(lead=2, wide_stores=True))
kernels = {"base": lambda x, wt, y, M, N, K: base(x, wt, y, M, N, K)}
S4 = dict(stages=4, bk=32)  # (K a multiple of 128: 3 stages of 64 need one of 192)
VARIANTS = {"warp": (None, {}), "wg40": (40, {}), "wg24": (24, {}), "wg56": (56, {}),
            "warp_s4k32": (None, S4), "wg24_s4k32": (24, S4), "wg56_s4k32": (56, S4),
            "wg40_s4k32": (40, S4),
            # (session 23: the direct store, 4 stages of 64, which session 22 checked
            # right but did not time)
            "warp_direct_s4": (None, dict(direct=True, stages=4)),
            "wg40_direct_s4": (40, dict(direct=True, stages=4)),
            "wg40_direct_s4_l3": (40, dict(direct=True, stages=4, lead=3))}
if len(sys.argv) > 4:
    VARIANTS = {name: VARIANTS[name] for name in sys.argv[4].split(",")}
for name, (regs, kw) in VARIANTS.items():
    kern = compiled_kernel(persistent_kernel("f16", regs).specialize(**kw))
    print(name, "registers", kern.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"),
          "local", kern.attribute("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"), flush=True)
    kernels[name] = lambda x, wt, y, M, N, K, kern=kern: kern(x, wt, y, M, N, K, P)
for M, N, K in ((4000, 4000, 1536), (2000, 6000, 4352), (300, 200, 512)):  # (K % 256: session 23)
    bad = []
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
    ref = x.double() @ wt.double().t()
    for name, kern in kernels.items():
        y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        kern(x, wt, y, M, N, K); torch.cuda.synchronize()
        err = float((y.double() - ref).abs().max())
        print(f"check {M}x{N}x{K} {name}: max err {err:.4f}", flush=True)
        if not err < 0.05 * max(1.0, float(ref.abs().max())) ** 0.5:
            bad.append(name)
    for name in bad:  # (wrong: reported, not timed)
        del kernels[name]
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
