"""The tuned shared-weights kernel reading its codes lane-interleaved (`chunk.patch`).

    python3 chunk_ab.py OUT.jsonl SHAPES DTYPES

The format stores a lane's 4b bytes of an atom as one run (lane t at 4b t), so a
warp's 16-byte load of int8 codes spans 1 KB for 512 useful bytes (ncu: 2x the ideal
sectors, `../qmm_h100_prefill_source_profile/`). With `chunk=c` (c = gcd(4b, 16)) the
kernel reads the same codes re-laid as 4b/c pieces of c bytes, piece j of lane t at
(32 j + t) c, each load a warp's contiguous 32 c bytes. Per (layer, type), M = 4096,
f16, group 128: both outputs compared bitwise, then each timed with the L2 read flush
(median of >= 30 runs) in three alternating rounds; `us` is the best round.
"""

import json
import math
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
            for name in dtypes.split(","):
                wdtype = parse(name)
                b = wdtype.bits
                c = math.gcd(4 * b, 16)
                qw = quantize(w, wdtype, 128, format="fragments")
                chunked = qw.packed.reshape(K // 32, -1, 32, 4 * b // c, c) \
                    .permute(0, 1, 3, 2, 4).contiguous().reshape(qw.packed.shape)
                runs, ys = {}, {}
                for label, ch, packed in (("base", 0, qw.packed), (f"chunk{c}", c, chunked)):
                    program = qmm_wgmma_shared_kernel("f16").specialize(
                        wdtype=wdtype, group_size=128, bm=bm, num_warps=warps,
                        stages=stages, lead=lead, prefetch=prefetch, wide_stores=True,
                        chunk=ch)
                    kern = compiled_kernel(program)
                    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
                    args = (x, packed, qw.scales, qw.scales, y, M, N, K)
                    runs[label] = lambda kern=kern, args=args: kern(*args)
                    runs[label]()
                    ys[label] = y
                torch.cuda.synchronize()
                equal = bool(torch.equal(*ys.values()))
                times = {label: [] for label in runs}
                for _ in range(3):
                    for label, run in runs.items():
                        times[label].append(timer(run)[0] * 1e6)
                us = {k: round(min(v), 2) for k, v in times.items()}
                row = {"shape": shape, "dtype": name, "equal": equal, "us": us,
                       "rounds": {k: [round(t, 2) for t in v] for k, v in times.items()},
                       "ratio": round(us[f"chunk{c}"] / us["base"], 4)}
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
