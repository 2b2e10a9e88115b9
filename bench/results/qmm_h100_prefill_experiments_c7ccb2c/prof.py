"""One profiled launch (between cudaProfilerStart/Stop, for `ncu --profile-from-start
off`) of each qmm_wgmma configuration on 8B qkv at M=4096, int4 or another type.

usage: [ROOT=path] python prof.py DTYPE "bm,warps,stages;..."
"""

import os
import sys

from ab import import_package


def main() -> None:
    if os.environ.get("ROOT"):
        import_package(os.environ["ROOT"])
    import torch

    from tilevm import dtypes
    from tilevm.backend.launch import compiled_kernel
    from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
    from tilevm.kernels.weights import quantize

    wd, configs = sys.argv[1:3]
    M, N, K = 4096, 12288, 4096
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    qw = quantize(w, wd, 128, format="fragments")
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    runs = []
    for cfg in configs.split(";"):
        bm, nw, st = map(int, cfg.split(","))
        kern = compiled_kernel(qmm_wgmma_kernel("f16").specialize(
            wdtype=dtypes.parse(wd), group_size=128, has_zeros=False, bm=bm, bk=64,
            num_warps=nw, stages=st))
        y = torch.empty(M, N, device="cuda", dtype=torch.float16)
        runs.append(lambda kern=kern, y=y: kern(x, qw.packed, qw.scales, qw.scales, y, M, N, K))
    for run in runs:  # compile and warm up outside the profiled range
        run()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for run in runs:
        run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
