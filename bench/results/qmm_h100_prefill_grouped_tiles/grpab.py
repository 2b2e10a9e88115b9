"""Usage: grpab.py OUT.jsonl DTYPES SHAPES GROUPS. Per (shape, dtype) at M = 4096: the
wgmma kernel's best time over `WGMMA_TILES` for each `group_m` (read flush, 30 runs a
median), checking that the order of the tiles changes no result."""

import itertools
import json
import sys
import time
from multiprocessing import Pool

SHAPES = {"8b.qkv": (12288, 4096), "70b.qkv": (10240, 8192), "70b.o": (8192, 8192),
          "70b.gate_up": (57344, 8192), "70b.down": (8192, 28672)}
M = 4096


def spec(wd, tiling, group_m):
    from tilevm import dtypes
    from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
    from tilevm.kernels.schedule import wgmma

    s = wgmma(*tiling, 128)
    return qmm_wgmma_kernel("f16").specialize(wdtype=dtypes.parse(wd), group_size=128,
                                              has_zeros=False, group_m=group_m,
                                              **s.constants())


def build(job):
    from tilevm.backend import cache
    from tilevm.backend.launch import build_artifact
    from tilevm.ir.printer import format_program

    p = spec(*job)
    cache.get_or_build(cache.CacheKey(format_program(p), "sm_90a"),
                       lambda: build_artifact(p, "sm_90a"))


def main():
    out, dts, shapes = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
    groups = [int(g) for g in sys.argv[4].split(",")]
    from tilevm.kernels.schedule import WGMMA_TILES

    jobs = list(itertools.product(dts, WGMMA_TILES, groups))
    t0 = time.time()
    with Pool(15) as pool:
        pool.map(build, jobs, chunksize=1)
    print("built", len(jobs), round(time.time() - t0), flush=True)
    import torch

    from tilevm.backend.launch import compiled_kernel
    from tilevm.bench.qmm import Timer
    from tilevm.kernels.weights import quantize

    timer = Timer(min_reps=30, l2_flush="read")
    with open(out, "a") as f:
        for sh in shapes:
            N, K = SHAPES[sh]
            torch.manual_seed(0)
            w = torch.randn(K, N, device="cuda", dtype=torch.float16)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            for wd in dts:
                qw = quantize(w, wd, 128, format="fragments")
                refs, res = {}, {}
                for g, tiling in itertools.product(groups, WGMMA_TILES):
                    kern = compiled_kernel(spec(wd, tiling, g))
                    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
                    args = (x, qw.packed, qw.scales, qw.scales, y, M, N, K)
                    kern(*args)
                    torch.cuda.synchronize()
                    ref = refs.setdefault(tiling, y.clone())
                    assert torch.equal(y, ref), (sh, wd, g, tiling)
                    res[f"{g}:{tiling}"] = round(timer(lambda: kern(*args))[0] * 1e6, 1)  # noqa: B023
                best = {g: min(v for k, v in res.items() if k.startswith(f"{g}:"))
                        for g in groups}
                print(sh, wd, best, flush=True)
                f.write(json.dumps(dict(shape=sh, dtype=wd, M=M, best=best, all=res)) + "\n")


if __name__ == "__main__":
    main()
