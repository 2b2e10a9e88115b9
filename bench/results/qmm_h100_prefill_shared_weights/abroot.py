"""Usage: abroot.py ROOT OUT.jsonl SHAPES DTYPES: the shared-weights kernel (256, 8, 4,
lead 2) and the wgmma kernel (128, 4, 4, lead 2) at M = 4096 (read flush, 30 runs a
median), with tilevm imported from the source tree ROOT (`git archive REV`): run once per
tree, alternating, on one lease (stmatrix_ab.jsonl: 1c83303 against 6a2db9c)."""

import importlib.util
import json
import sys

root = sys.argv[1]
spec = importlib.util.spec_from_file_location("tilevm", f"{root}/__init__.py",
                                              submodule_search_locations=[root])
module = importlib.util.module_from_spec(spec)
sys.modules["tilevm"] = module
spec.loader.exec_module(module)

import torch  # noqa: E402

from tilevm import dtypes  # noqa: E402
from tilevm.backend.launch import compiled_kernel  # noqa: E402
from tilevm.bench.qmm import Timer  # noqa: E402
from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel  # noqa: E402
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel  # noqa: E402
from tilevm.kernels.weights import quantize  # noqa: E402

SHAPES = {"8b.qkv": (12288, 4096), "70b.qkv": (10240, 8192), "70b.o": (8192, 8192),
          "70b.gate_up": (57344, 8192), "70b.down": (8192, 28672)}
M = 4096


def main():
    out, shapes, dts = sys.argv[2], sys.argv[3].split(","), sys.argv[4].split(",")
    timer = Timer(min_reps=30, l2_flush="read")
    with open(out, "a") as f:
        for sh in shapes:
            N, K = SHAPES[sh]
            torch.manual_seed(0)
            w = torch.randn(K, N, device="cuda", dtype=torch.float16)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            for wd in dts:
                qw = quantize(w, wd, 128, format="fragments")
                wdtype = dtypes.parse(wd)
                res = {}
                for name, program in (
                        ("wgmma", qmm_wgmma_kernel("f16").specialize(
                            wdtype=wdtype, group_size=128, bm=128, bk=64, num_warps=4,
                            stages=4, lead=2)),
                        ("shared", qmm_wgmma_shared_kernel("f16").specialize(
                            wdtype=wdtype, group_size=128))):
                    kern = compiled_kernel(program)
                    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
                    args = (x, qw.packed, qw.scales, qw.scales, y, M, N, K)
                    kern(*args)
                    torch.cuda.synchronize()
                    res[name] = round(timer(lambda: kern(*args))[0] * 1e6, 1)  # noqa: B023
                row = dict(root=root, shape=sh, dtype=wd, us=res)
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
