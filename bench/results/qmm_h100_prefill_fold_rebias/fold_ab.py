"""The tuned shared-weights kernel with a low-bit float's re-bias folded into its scales.

    python3 fold_ab.py OUT.jsonl SHAPES DTYPES

A float code converts to f16 as its value times 2^-e (no float op) followed by a
multiplication by 2^e, the exponent re-bias (`qmm.rebias_exponent`), then by the
group's scale: two `HMUL2` a pair. With `fold_rebias` the kernel multiplies the k-tile's
scales by 2^e once instead (exact while scale * 2^e is finite in f16). Per (layer, type),
M = 4096, f16, group 128: both outputs compared bitwise, then each timed with the L2
read flush (median of >= 30 runs) in three alternating rounds; `us` is the best round.
"""

import json
import sys

import torch

from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import SHAPES, Timer
from tilevm.dtypes import parse
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.schedule import WGMMA_SHARED_TILES
from tilevm.kernels.weights import quantize

M = 4096


def main() -> None:
    out, shapes, dtypes = sys.argv[1:4]
    bm, warps, stages, lead, prefetch = WGMMA_SHARED_TILES[0]
    timer = Timer(min_reps=30, l2_flush="read")
    with open(out, "a") as f:
        for shape in shapes.split(","):
            N, K = SHAPES[shape]
            torch.manual_seed(0)
            w = torch.randn(K, N, device="cuda", dtype=torch.float16)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            cublas = timer(lambda x=x, w=w: torch.matmul(x, w))[0] * 1e6
            for name in dtypes.split(","):
                wdtype = parse(name)
                qw = quantize(w, wdtype, 128, format="fragments")
                runs, ys = {}, {}
                for label, fold in (("base", False), ("fold", True)):
                    program = qmm_wgmma_shared_kernel("f16").specialize(
                        wdtype=wdtype, group_size=128, bm=bm, num_warps=warps,
                        stages=stages, lead=lead, prefetch=prefetch, wide_stores=True,
                        fold_rebias=fold)
                    kern = compiled_kernel(program)
                    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
                    args = (x, qw.packed, qw.scales, qw.scales, y, M, N, K)
                    runs[label] = lambda kern=kern, args=args: kern(*args)
                    runs[label]()
                    ys[label] = y
                torch.cuda.synchronize()
                times = {label: [] for label in runs}
                for _ in range(3):
                    for label, run in runs.items():
                        times[label].append(timer(run)[0] * 1e6)
                us = {k: round(min(v), 2) for k, v in times.items()}
                row = {"shape": shape, "dtype": name,
                       "equal": bool(torch.equal(ys["base"], ys["fold"])),
                       "scale_max": float(qw.scales.abs().max()), "us": us,
                       "rounds": {k: [round(t, 2) for t in v] for k, v in times.items()},
                       "cublas_us": round(cublas, 2),
                       "ratio": round(us["fold"] / us["base"], 4),
                       "vs_cublas": {k: round(cublas / v, 3) for k, v in us.items()}}
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
