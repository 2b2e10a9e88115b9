"""pw8_ab.py OUT SHAPES DTYPES ROUNDS (with two_producers.patch applied): the shared-weights
kernel (tuned tiling: 256 x 128, 8 warps, 4 stages, x 2 k-tiles ahead, wide stores) with
its weights converted by two producer warpgroups (`producer=R` under TV_PW8=1: 8 warps
convert as the 8 consumers do in the tuned kernel; 512 threads, so each m64n256 wgmma is
cut into two m64n128) against the kernel as the tuner runs it (codes a loop iteration
ahead). M = 4096, f16, group 128, L2 read flush. Every
variant is first compared with the base bitwise on ragged shapes (the base is GPU-tested
against float64; a mismatching variant is reported and not timed), and its output sum
with the base's on each timed layer."""
# ruff: noqa: E501
import json
import os
import sys

import torch

from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import SHAPES, Timer
from tilevm.dtypes import parse
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.weights import quantize

out, shapes, dtypes, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), int(sys.argv[4])
TUNED = dict(group_size=128, wide_stores=True)
VARIANTS = {"base": dict(prefetch=4), "w96p1": dict(producer=96, prefetch=1),
            "w96p2": dict(producer=96, prefetch=2), "w88p2": dict(producer=88, prefetch=2),
            "w96p3": dict(producer=96, prefetch=3)}


def kernels_for(wdtype):
    found = {}
    for name, kw in VARIANTS.items():
        os.environ["TV_PW8"] = "1" if kw.get("producer") else ""
        kern = compiled_kernel(qmm_wgmma_shared_kernel("f16").specialize(wdtype=wdtype, **TUNED, **kw))
        print(wdtype.name, name, "registers", kern.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"),
              "local", kern.attribute("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"), flush=True)
        found[name] = kern
    return found


def run(kern, x, qw, M, N, K):
    y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    kern(x, qw.packed, qw.scales, qw.scales, y, M, N, K)
    torch.cuda.synchronize()
    return y


kernels = {}
for name in dtypes:
    wdtype = parse(name)
    kernels[name] = kernels_for(wdtype)
    for M, N, K in ((4000, 4000, 1152), (300, 200, 384), (2000, 6016, 4224), (256, 1000, 128)):
        torch.manual_seed(1)
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        qw = quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), wdtype, 128, format="fragments")
        base = run(kernels[name]["base"], x, qw, M, N, K)
        for label in [v for v in kernels[name] if v != "base"]:
            y = run(kernels[name][label], x, qw, M, N, K)
            same = bool(torch.equal(y, base))
            print(f"check {name} {M}x{N}x{K} {label}: {'bitwise equal' if same else 'DIFFERS'}", flush=True)
            if not same:
                del kernels[name][label]
timer = Timer(min_reps=50, l2_flush="read")
with open(out, "a") as f:
    for rnd in range(rounds):
        for shape in shapes:
            N, K = SHAPES[shape]
            M = 4096
            torch.manual_seed(0)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            w = torch.randn(K, N, device="cuda", dtype=torch.float16)
            for name in dtypes:
                qw = quantize(w, parse(name), 128, format="fragments")
                y = torch.empty(M, N, device="cuda", dtype=torch.float16)
                args = (x, qw.packed, qw.scales, qw.scales, y, M, N, K)
                us, sums = {}, {}
                for label, kern in kernels[name].items():
                    y.zero_()
                    kern(*args)
                    torch.cuda.synchronize()
                    sums[label] = float(y.double().sum())
                    us[label] = round(timer(lambda k=kern, a=args: k(*a))[0] * 1e6, 1)
                a = torch.randn(M, K, device="cuda", dtype=torch.float16)
                b = torch.randn(K, N, device="cuda", dtype=torch.float16)
                us["cublas"] = round(timer(lambda a=a, b=b: a @ b)[0] * 1e6, 1)
                row = {"round": rnd, "shape": shape, "dtype": name, "us": us, "sums": sums}
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")
