"""cluster_ab.py OUT SHAPES ROUNDS [VARIANT,...]: the dequant pair's f16 matmul
(`wt_matmul_kernel`) with a producer warp, the wide epilogue, and clusters of 2 or 4
blocks that share each x tile through TMA multicast (session 23), against the matmul as
the tuner runs it (lead 2 of 4 stages, wide stores, no producer) and cuBLAS; M = 4096,
f16, L2 read flush. Every variant is checked against float64 on ragged shapes first
(wrong ones are reported, not timed), and its output sum against the base's on each
timed shape."""
# ruff: noqa: B023, E501, E702
import json
import sys
from dataclasses import replace

import torch

from tilevm.backend.launch import compiled_kernel
from tilevm.bench.qmm import SHAPES, Timer
from tilevm.ir import instructions as ins
from tilevm.ir.stmt import For, If, Seq
from tilevm.kernels.qmm_dequant import wt_matmul_kernel


def without_multicast(seq):
    """`seq` with every copy a plain one (the clusters kept): what the cluster alone
    costs."""
    out = []
    for st in seq.body:
        if isinstance(st, ins.CopyAsync):
            st = replace(st, multicast=False)
        elif isinstance(st, Seq):
            st = without_multicast(st)
        elif isinstance(st, For):
            st = replace(st, body=without_multicast(st.body))
        elif isinstance(st, If):
            st = replace(st, then_body=without_multicast(st.then_body),
                         else_body=st.else_body and without_multicast(st.else_body))
        out.append(st)
    return Seq(body=tuple(out))


out, shapes, rounds = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
VARIANTS = {
    "base": dict(lead=2, wide_stores=True),
    "prod_wide": dict(producer=True, lead=2, wide_stores=True),
    "c2": dict(producer=True, lead=2, wide_stores=True, cluster=2),
    "c2_l3": dict(producer=True, lead=3, wide_stores=True, cluster=2),
    "c4": dict(producer=True, lead=2, wide_stores=True, cluster=4),
    "c2_narrow": dict(producer=True, lead=2, cluster=2),
    "c2_nomc": dict(producer=True, lead=2, wide_stores=True, cluster=2, multicast=False),
}
if len(sys.argv) > 4:
    VARIANTS = {"base": VARIANTS["base"], **{n: VARIANTS[n] for n in sys.argv[4].split(",")}}
kernels = {}
for name, kw in VARIANTS.items():
    kw = dict(kw)
    program = wt_matmul_kernel("f16").specialize(**{k: v for k, v in kw.items() if k != "multicast"})
    if not kw.get("multicast", True):
        program = replace(program, body=without_multicast(program.body))
    kern = compiled_kernel(program)
    print(name, kw, "registers", kern.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"),
          "local", kern.attribute("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"), flush=True)
    kernels[name] = kern
for M, N, K in ((4000, 4000, 1152), (2000, 6000, 4224), (300, 200, 384), (256, 1000, 64)):
    bad = []
    torch.manual_seed(1)
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
    ref = x.double() @ wt.double().t()
    for name, kern in kernels.items():
        y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        kern(x, wt, y, M, N, K); torch.cuda.synchronize()
        err = float((y.double() - ref).abs().max())  # (nan: never stored)
        print(f"check {M}x{N}x{K} {name}: max err {err:.4f}", flush=True)
        if not err < 0.05 * max(1.0, float(ref.abs().max())) ** 0.5:
            bad.append(name)
    for name in bad:
        del kernels[name]
timer = Timer(min_reps=50, l2_flush="read")
with open(out, "a") as f:
    for rnd in range(rounds):
        for shape in shapes:
            N, K = SHAPES[shape]; M = 4096
            torch.manual_seed(0)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
            y = torch.empty(M, N, device="cuda", dtype=torch.float16)
            us, sums = {}, {}
            us["cublas"] = timer(lambda: torch.matmul(x, wt.t(), out=y))[0] * 1e6
            for name, kern in kernels.items():
                kern(x, wt, y, M, N, K); torch.cuda.synchronize()
                sums[name] = float(y.double().sum())
                us[name] = timer(lambda: kern(x, wt, y, M, N, K))[0] * 1e6
            row = {"round": rnd, "shape": shape, "us": us, "sums": sums}
            print(json.dumps({"shape": shape, **{k: round(v / us["base"], 3) for k, v in us.items()},
                              "same_sums": all(v == sums["base"] for v in sums.values())}), flush=True)
            f.write(json.dumps(row) + "\n")
