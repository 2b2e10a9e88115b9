"""Usage: leadab.py OUT.jsonl DTYPES SHAPES. Per (shape, dtype) at M = 4096: the wgmma
kernel's time for each tiling (bm, warps, stages, lead; lead 0 = stages - 1) and cuBLAS
f16 (read flush, 30 runs a median); every tiling's output checked identical to the
first's. LEADAB_CONFIGS="bm,warps,stages,lead;..." replaces the tilings (mincta.jsonl:
with minctasm.patch applied and TILEVM_MINCTA=3, then without)."""

import itertools
import json
import os
import sys
import time
from multiprocessing import Pool

SHAPES = {"8b.qkv": (12288, 4096), "70b.qkv": (10240, 8192), "70b.o": (8192, 8192),
          "70b.gate_up": (57344, 8192), "70b.down": (8192, 28672)}
M = 4096
CONFIGS = [(128, 4, 2, 0), (128, 4, 3, 0), (128, 8, 4, 0),
           (128, 4, 4, 1), (128, 4, 4, 2), (128, 8, 4, 1), (128, 8, 4, 2)]
if os.environ.get("LEADAB_CONFIGS"):
    CONFIGS = [tuple(map(int, c.split(","))) for c in os.environ["LEADAB_CONFIGS"].split(";")]


def spec(wd, cfg):
    from tilevm import dtypes
    from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel

    bm, warps, stages, lead = cfg
    return qmm_wgmma_kernel("f16").specialize(wdtype=dtypes.parse(wd), group_size=128,
                                              has_zeros=False, bm=bm, bk=64,
                                              num_warps=warps, stages=stages, lead=lead)


def build(job):
    from tilevm.backend import cache
    from tilevm.backend.launch import build_artifact
    from tilevm.ir.printer import format_program

    p = spec(*job)
    cache.get_or_build(cache.CacheKey(format_program(p), "sm_90a"),
                       lambda: build_artifact(p, "sm_90a"))


def main():
    out, dts, shapes = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
    jobs = list(itertools.product(dts, CONFIGS))
    t0 = time.time()
    with Pool(15) as pool:
        pool.map(build, jobs, chunksize=1)
    print("built", len(jobs), round(time.time() - t0), flush=True)
    import torch

    from tilevm.backend.launch import compiled_kernel
    from tilevm.bench.qmm import Timer
    from tilevm.kernels.weights import quantize

    timer = Timer(min_reps=30, l2_flush="read")
    mincta = os.environ.get("TILEVM_MINCTA")
    with open(out, "a") as f:
        for sh in shapes:
            N, K = SHAPES[sh]
            torch.manual_seed(0)
            w = torch.randn(K, N, device="cuda", dtype=torch.float16)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            cublas = round(timer(lambda: x @ w)[0] * 1e6, 1)  # noqa: B023
            for wd in dts:
                qw = quantize(w, wd, 128, format="fragments")
                ref, res = None, {}
                for cfg in CONFIGS:
                    kern = compiled_kernel(spec(wd, cfg))
                    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
                    args = (x, qw.packed, qw.scales, qw.scales, y, M, N, K)
                    kern(*args)
                    torch.cuda.synchronize()
                    if ref is None:
                        ref = y.clone()
                    assert torch.equal(y, ref), (sh, wd, cfg)
                    us = timer(lambda: kern(*args))[0] * 1e6  # noqa: B023
                    res[",".join(map(str, cfg))] = round(us, 1)
                old = min([v for k, v in res.items() if k.endswith(",0")] or [0])
                new = min([v for k, v in res.items() if not k.endswith(",0")] or [0])
                print(sh, wd, mincta, "cublas", cublas,
                      {k: round(cublas / v, 3) for k, v in res.items()}, flush=True)
                f.write(json.dumps(dict(shape=sh, dtype=wd, M=M, cublas_us=cublas, old=old,
                                        new=new, mincta=mincta, all=res)) + "\n")


if __name__ == "__main__":
    main()
