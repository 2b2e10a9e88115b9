"""epi_q_ab.py OUT SHAPES DTYPES ROUNDS: the two quantized Hopper kernels (shared-weights
256x128 and the register-A 128x128, as the tuner times them) with y stored through shared
memory against the direct store, M = 4096, read flush, 50 runs; y bitwise equal between
the two stores, and a ragged case against float64."""
# ruff: noqa: B023, E501, E702, E731
import json
import sys

import torch

from tilevm import dtypes
from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import SHAPES, Timer
from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.weights import quantize

TILES = {"shared": (qmm_wgmma_shared_kernel, dict(bm=256, num_warps=8, stages=4, lead=2, prefetch=4)),
         "wgmma": (qmm_wgmma_kernel, dict(bm=128, num_warps=4, stages=4, lead=2, prefetch=1))}
out, shapes, names, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), int(sys.argv[4])
timer = Timer(min_reps=50, l2_flush="read")


def kernels(wd):
    found = {}
    for tile, (factory, kw) in TILES.items():
        for epi in (False, True):
            found[f"{tile}{'_wide' if epi else ''}"] = compiled_kernel(
                factory("f16").specialize(wdtype=wd, group_size=128, wide_stores=epi, **kw))
    return found


for name in names:  # ragged M and N (a multiple of 8), against float64
    wd = dtypes.parse(name)
    M, N, K = 1000, 776, 1024
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    qw = quantize(w, wd, 128, format="fragments")
    ref = x.double() @ qw.dequantize().double()
    for kname, kern in kernels(wd).items():
        y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        kern(x, qw.packed, qw.scales, qw.scales, y, M, N, K); torch.cuda.synchronize()
        err = float((y.double() - ref).abs().max())
        print(f"check {name} {kname}: max err {err:.4f}", flush=True)
        assert err < 0.05 * max(1.0, float(ref.abs().max())) ** 0.5, err
with open(out, "a") as f:
    for rnd in range(rounds):
        for shape in shapes:
            N, K = SHAPES[shape]; M = 4096
            torch.manual_seed(0)
            w = torch.randn(K, N, device="cuda", dtype=torch.float16)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            y = torch.empty(M, N, device="cuda", dtype=torch.float16)
            us = {"cublas": timer(lambda: torch.matmul(x, w, out=y))[0] * 1e6}
            for name in names:
                wd = dtypes.parse(name)
                qw = quantize(w, wd, 128, format="fragments")
                ys = {}
                for kname, kern in kernels(wd).items():
                    run = lambda: kern(x, qw.packed, qw.scales, qw.scales, y, M, N, K)
                    run(); torch.cuda.synchronize(); ys[kname] = y.clone()
                    us[f"{name}.{kname}"] = timer(run)[0] * 1e6
                same = {t: bool(torch.equal(ys[t], ys[t + "_wide"])) for t in TILES}
                us[f"{name}.same"] = same
                assert all(same.values()), same
            row = {"round": rnd, "shape": shape, "us": us}
            print(json.dumps({"shape": shape, **{k: (round(v / us["cublas"], 3) if isinstance(v, float) else v) for k, v in us.items()}}), flush=True)
            f.write(json.dumps(row) + "\n")
