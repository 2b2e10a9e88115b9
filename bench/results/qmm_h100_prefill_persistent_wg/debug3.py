"""debug3.py: setmaxnreg in the plain (not persistent) matmul with a producer warp
(`wt_matmul_kernel(producer=True)`), its PTX edited into a producer warpgroup of 384
threads: correct or not on the GPU (session 22)."""
# ruff: noqa: E402, E501, E702
import copy
import re
from dataclasses import replace

import torch

from tilevm.backend import runtime
from tilevm.backend.launch import build_artifact
from tilevm.kernels.qmm_dequant import wt_matmul_kernel


def check(name, kern):
    for M, N, K in ((256, 128, 768), (4000, 4000, 1536)):
        torch.manual_seed(0)
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
        ref = x.double() @ wt.double().t()
        y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        kern(x, wt, y, M, N, K); torch.cuda.synchronize()
        bad = ((y.double() - ref).abs() > 0.5) | y.isnan()
        print(f"{name} {M}x{N}x{K}: bad {int(bad.sum())} of {bad.numel()}", flush=True)


art = build_artifact(wt_matmul_kernel("f16").specialize(producer=True, lead=3), "sm_90a")
ptx = art.ptx.replace(".maxntid 288", ".maxntid 384\n.maxnreg 168")
m = re.search(r"setp.lt.u32 \t(%p\d+), %r\d+, 256;\n\t@%p\d+ bra \t(\$L__BB0_\d+);\n", ptx)
label = m.group(2)


def edited(dec, inc):
    text = ptx
    if dec:
        text = text[:m.end()] + f"\tsetmaxnreg.dec.sync.aligned.u32 {dec};\n" + text[m.end():]
    if inc:
        text = text.replace(label + ":\n", label + f":\n\tsetmaxnreg.inc.sync.aligned.u32 {inc};\n", 1)
    extra = copy.deepcopy(dict(art.extra))
    extra["signature"]["num_threads"] = 384
    return replace(art, ptx=text, num_threads=384, extra=extra)


for name, (dec, inc) in {"384 threads": (0, 0), "dec 40": (40, 0), "dec 40 inc 232": (40, 232),
                         "dec 40 inc 168": (40, 168), "dec 160": (160, 0)}.items():
    try:
        kern = runtime.load_artifact(edited(dec, inc))
        print(name, "registers", kern.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"), "local",
              kern.attribute("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"), flush=True)
        check(name, kern)
    except Exception as e:  # noqa: BLE001
        print(name, "ERROR", type(e).__name__, str(e)[:300], flush=True)
