"""debug2.py: the producer-warpgroup persistent matmul (`pp3.py`, registers=40) with its
PTX edited, to find what makes it wrong on the GPU (session 22)."""
# ruff: noqa: E402, E501, E702
import re
import sys
from dataclasses import replace

import torch

sys.path.insert(0, "bench/results/qmm_h100_prefill_persistent_wg")
from pp3 import persistent_kernel

from tilevm.backend import runtime
from tilevm.backend.launch import build_artifact


def check(name, kern, P=132):
    for M, N, K in ((256, 128, 768), (4000, 4000, 1536)):
        torch.manual_seed(0)
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
        ref = x.double() @ wt.double().t()
        y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        kern(x, wt, y, M, N, K, P); torch.cuda.synchronize()
        bad = ((y.double() - ref).abs() > 0.5) | y.isnan()
        print(f"{name} {M}x{N}x{K}: bad {int(bad.sum())} of {bad.numel()}", flush=True)


art = build_artifact(persistent_kernel("f16", 40).specialize(), "sm_90a")
ptx = art.ptx
print(re.findall(r"\.maxn\w+ \d+|setmaxnreg[^;]*;", ptx), flush=True)
variants = {
    "as is": ptx,
    "no setmaxnreg": re.sub(r"\tsetmaxnreg[^\n]*\n", "", ptx),
    "no .maxnreg": re.sub(r"\.maxnreg \d+\n", "", ptx),
    "inc 200": ptx.replace("setmaxnreg.inc.sync.aligned.u32 232;", "setmaxnreg.inc.sync.aligned.u32 200;"),
    "inc 168": ptx.replace("setmaxnreg.inc.sync.aligned.u32 232;", "setmaxnreg.inc.sync.aligned.u32 168;"),
}
for name, text in variants.items():
    try:
        kern = runtime.load_artifact(replace(art, ptx=text))
        print(name, "registers", kern.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"), "local",
              kern.attribute("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"), flush=True)
        check(name, kern)
    except Exception as e:  # noqa: BLE001
        print(name, "ERROR", type(e).__name__, str(e)[:300], flush=True)
