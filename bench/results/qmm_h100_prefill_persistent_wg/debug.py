"""debug.py: which persistent variants are correct on the GPU (session 22)."""
# ruff: noqa: B023, E402, E501, E702
import sys

import llvmlite.ir as ir
import torch

sys.path.insert(0, "bench/results/qmm_h100_prefill_persistent_wg")
sys.path.insert(0, "bench/results/qmm_h100_prefill_producer")
from persistent_producer import persistent_producer_kernel
from pp3 import persistent_kernel

from tilevm.backend.launch import compiled_kernel
from tilevm.backend.lowering import wgmma


def selects(self, cg, tensor, values):
    zero = cg.b.icmp_unsigned("==", cg.b.load(self.scales[tensor.name]), wgmma._ZERO)
    return [cg.b.select(zero, ir.Constant(v.type, 0), v) for v in values]


def check(name, make, P, shapes):
    for M, N, K in shapes:
        torch.manual_seed(0)
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
        ref = x.double() @ wt.double().t()
        y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        kern = make()
        kern(x, wt, y, M, N, K, P); torch.cuda.synchronize()
        bad = ((y.double() - ref).abs() > 0.5) | y.isnan()
        rows = bad.any(1).nonzero().flatten().tolist()
        cols = bad.any(0).nonzero().flatten().tolist()
        print(f"{name} P={P} {M}x{N}x{K}: bad {int(bad.sum())} rows {rows[:3]}..{rows[-3:]} ({len(rows)}) cols {cols[:3]}..{cols[-3:]} ({len(cols)})", flush=True)


shapes = [(256, 128, 768), (512, 128, 768), (256, 256, 768), (4000, 4000, 1536)]
for P in (1, 132):
    check("ppgemm s4", lambda: compiled_kernel(persistent_producer_kernel("f16").specialize(stages=4, lead=2)), P, shapes[:1] + shapes[3:])
    check("ppgemm s3", lambda: compiled_kernel(persistent_producer_kernel("f16").specialize(stages=3, lead=2)), P, shapes)
    for regs in (None, 40):
        check(f"pp3 r{regs}", lambda: compiled_kernel(persistent_kernel("f16", regs).specialize()), P, shapes)
wgmma.InFlight._zero_unless_written = selects
persistent_kernel.cache_clear()
from tilevm.backend import launch

launch._LOADED.clear()
import os

os.environ["TILEVM_CACHE_DIR"] = "/tmp/tvc_sel"

for P in (1, 132):
    for regs in (None, 40):
        check(f"pp3 selects r{regs}", lambda: compiled_kernel(persistent_kernel("f16", regs).specialize(group_m=7)), P, shapes)
