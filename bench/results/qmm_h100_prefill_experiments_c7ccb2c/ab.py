"""Time qmm_wgmma variants on 8B qkv (N=12288, K=4096, M=4096) against cuBLAS f16.

usage: python ab.py ROOT OUT.jsonl DTYPES "bm,warps,stages;..."  (the package at ROOT)
"""

import importlib.util
import json
import sys
import time


def import_package(root: str):
    """Import the tilevm package found at `root` (a patched copy) as `tilevm`."""
    spec = importlib.util.spec_from_file_location(
        "tilevm", f"{root}/__init__.py", submodule_search_locations=[root])
    module = importlib.util.module_from_spec(spec)
    sys.modules["tilevm"] = module
    spec.loader.exec_module(module)


def main() -> None:
    root, out, wdtypes, configs = sys.argv[1:5]
    import_package(root)
    import torch

    from tilevm import dtypes
    from tilevm.backend.launch import compiled_kernel
    from tilevm.bench.qmm import Timer
    from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
    from tilevm.kernels.weights import quantize

    timer = Timer(min_reps=50)
    M, N, K = 4096, 12288, 4096
    with open(out, "a") as f:
        for wd in wdtypes.split(","):
            torch.manual_seed(0)
            w = torch.randn(K, N, device="cuda", dtype=torch.float16)
            qw = quantize(w, wd, 128, format="fragments")
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            wf = qw.dequantize().cuda()
            ref = x.double() @ wf.double()
            t_cublas = timer(lambda x=x, wf=wf: x @ wf.half())[0]
            for cfg in configs.split(";"):
                bm, nw, st = map(int, cfg.split(","))
                t0 = time.time()
                program = qmm_wgmma_kernel("f16").specialize(
                    wdtype=dtypes.parse(wd), group_size=128, has_zeros=False, bm=bm, bk=64,
                    num_warps=nw, stages=st)
                kern = compiled_kernel(program)
                compile_s = time.time() - t0
                y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)

                def run(kern=kern, y=y, x=x, qw=qw):
                    kern(x, qw.packed, qw.scales, qw.scales, y, M, N, K)
                run()
                torch.cuda.synchronize()
                err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
                t = timer(run)[0]
                rec = dict(root=root.rstrip("/").split("/")[-1], wd=wd, cfg=cfg,
                           us=round(t * 1e6, 1), cublas_us=round(t_cublas * 1e6, 1),
                           x_cublas=round(t_cublas / t, 3), err=err,
                           compile_s=round(compile_s, 2))
                print(json.dumps(rec), flush=True)
                f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
