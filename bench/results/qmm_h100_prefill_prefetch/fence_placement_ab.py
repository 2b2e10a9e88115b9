"""fence_placement_ab.py ROOT OUT SHAPES DTYPES: prefill kernels with tilevm imported from
ROOT (fence placement A/B)."""
# ruff: noqa: E402

import importlib.util
import json
import sys

root = sys.argv[1]
spec = importlib.util.spec_from_file_location(
    "tilevm", f"{root}/__init__.py", submodule_search_locations=[root]
)
m = importlib.util.module_from_spec(spec)
sys.modules["tilevm"] = m
spec.loader.exec_module(m)
import torch

from tilevm import dtypes
from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import Timer
from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.weights import quantize

SHAPES = {
    "8b.qkv": (12288, 4096),
    "70b.qkv": (10240, 8192),
    "70b.o": (8192, 8192),
    "70b.gate_up": (57344, 8192),
    "70b.down": (8192, 28672),
}
M = 4096
timer = Timer(min_reps=30, l2_flush="read")
with open(sys.argv[2], "a") as f:
    for sh in sys.argv[3].split(","):
        N, K = SHAPES[sh]
        torch.manual_seed(0)
        w = torch.randn(K, N, device="cuda", dtype=torch.float16)
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        for wd in sys.argv[4].split(","):
            dt = dtypes.parse(wd)
            qw = quantize(w, wd, 128, format="fragments")
            progs = {
                "wg4.2": qmm_wgmma_kernel("f16").specialize(
                    wdtype=dt, group_size=128, bm=128, num_warps=4, stages=4, lead=2
                ),
                "wg2.0": qmm_wgmma_kernel("f16").specialize(
                    wdtype=dt, group_size=128, bm=128, num_warps=4, stages=2
                ),
                "ss": qmm_wgmma_shared_kernel("f16").specialize(wdtype=dt, group_size=128),
                "ss.ca2": qmm_wgmma_shared_kernel("f16").specialize(
                    wdtype=dt, group_size=128, codes_ahead=2
                ),
                "ss.ca2.late": qmm_wgmma_shared_kernel("f16").specialize(
                    wdtype=dt, group_size=128, codes_ahead=2, codes_late=True
                ),
            }
            if wd != "int8":
                progs["wg4.2.ca2"] = qmm_wgmma_kernel("f16").specialize(
                    wdtype=dt, group_size=128, bm=128, num_warps=4, stages=4, lead=2, codes_ahead=2
                )
            res, sums = {}, {}
            y = torch.empty(M, N, device="cuda", dtype=torch.float16)
            args = (x, qw.packed, qw.scales, qw.scales, y, M, N, K)
            for name, prog in progs.items():
                kern = compiled_kernel(prog)
                y.zero_()
                kern(*args)
                torch.cuda.synchronize()
                sums[name] = float(y.double().sum())
                res[name] = round(timer(lambda kern=kern, args=args: kern(*args))[0] * 1e6, 1)
            row = dict(root=root, shape=sh, dtype=wd, us=res, sums=sums)
            print(json.dumps(row), flush=True)
            f.write(json.dumps(row) + "\n")
