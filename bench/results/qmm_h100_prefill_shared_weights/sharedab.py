"""Usage: sharedab.py OUT.jsonl SHAPES DTYPES. Per (shape, dtype) at M = 4096: the
shared-weights wgmma kernel (`kernels.qmm_wgmma_shared`) against two tilings of
`kernels.qmm_wgmma` and cuBLAS f16 (read flush, 30 runs a median); every output checked
identical to the first kernel's."""

import json
import sys

import torch

from tilevm import dtypes
from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import Timer
from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.weights import quantize

SHAPES = {"8b.qkv": (12288, 4096), "70b.qkv": (10240, 8192), "70b.o": (8192, 8192),
          "70b.gate_up": (57344, 8192), "70b.down": (8192, 28672)}
M = 4096


def programs(wd):
    """(name, program) of the kernels compared."""
    wdtype = dtypes.parse(wd)
    found = [(f"wgmma{c}", qmm_wgmma_kernel("f16").specialize(
        wdtype=wdtype, group_size=128, bm=c[0], bk=64, num_warps=c[1], stages=c[2],
        lead=c[3])) for c in ((128, 4, 2, 0), (128, 4, 4, 2))]
    found += [(f"shared{c}", qmm_wgmma_shared_kernel("f16").specialize(
        wdtype=wdtype, group_size=128, bm=c[0], num_warps=c[1], stages=c[2], lead=c[3]))
        for c in ((256, 8, 4, 2), (256, 8, 3, 1), (128, 8, 4, 2))]
    return found


def main():
    out, shapes, dts = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
    timer = Timer(min_reps=30, l2_flush="read")
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
                for name, program in programs(wd):
                    kern = compiled_kernel(program)
                    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
                    args = (x, qw.packed, qw.scales, qw.scales, y, M, N, K)
                    kern(*args)
                    torch.cuda.synchronize()
                    if ref is None:
                        ref = y.clone()
                    assert torch.equal(y, ref), (sh, wd, name)
                    res[name] = round(timer(lambda: kern(*args))[0] * 1e6, 1)  # noqa: B023
                row = dict(shape=sh, dtype=wd, M=M, cublas_us=cublas, us=res)
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
