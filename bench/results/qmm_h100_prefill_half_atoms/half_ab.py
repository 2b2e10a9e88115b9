"""half_ab.py OUT SHAPES DTYPES ROUNDS: the A-in-registers kernel (`kernels.qmm_wgmma`) with
`half_atoms` (each warp converts 16 columns, one A fragment's rows: a warpgroup's 64
columns are one m64n256 wgmma over 256 rows of x, so each weight is converted once per
256 rows with no shared-memory round trip) against the shared-weights kernel as the
tuner runs it. M = 4096, f16, group 128, L2 read flush, beside cuBLAS. Each variant is
first compared bitwise with the base on `bench.ab.RAGGED` (a variant that differs is
not timed); `python -m tilevm.bench.ab OUT` summarizes."""

import sys

import torch

from tilevm.backend.launch import compiled_kernel
from tilevm.bench.ab import RAGGED, time_variants
from tilevm.dtypes import parse
from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.weights import quantize

out, shapes, dtypes, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), \
    int(sys.argv[4])
TUNED = dict(group_size=128, wide_stores=True, prefetch=4)
HALF = {  # label: (stages, lead, prefetch, late_cast)
    "h_s4l2p2": (4, 2, 2, False), "h_s4l2p2_late": (4, 2, 2, True),
    "h_s4l2p3_late": (4, 2, 3, True), "h_s6l2p2": (6, 2, 2, False),
    "h_s6l3p2": (6, 3, 2, False), "h_s6l2p2_late": (6, 2, 2, True),
}


def variants(wdtype):
    found = {"base": qmm_wgmma_shared_kernel("f16").specialize(wdtype=wdtype, **TUNED)}
    for label, (stages, lead, prefetch, late_cast) in HALF.items():
        found[label] = qmm_wgmma_kernel("f16").specialize(
            wdtype=wdtype, group_size=128, wide_stores=True, half_atoms=True, bm=256,
            num_warps=8, stages=stages, lead=lead, prefetch=prefetch, late_cast=late_cast)
    return found


def run(kern, x, qw, M, N, K):
    y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    kern(x, qw.packed, qw.scales, qw.scales, y, M, N, K)
    torch.cuda.synchronize()
    return y


programs = {}
for name in dtypes:
    wdtype = parse(name)
    found = programs[name] = variants(wdtype)
    for label, prog in found.items():
        kern = compiled_kernel(prog)
        print(name, label, "registers", kern.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"),
              "local", kern.attribute("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"), flush=True)
    for M, N, K in RAGGED:
        torch.manual_seed(1)
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        w = torch.randn(K, N, device="cuda", dtype=torch.float16)
        qw = quantize(w, wdtype, 128, format="fragments")
        base = run(compiled_kernel(found["base"]), x, qw, M, N, K)
        ref = x.double() @ qw.dequantize().double()
        err = float((base.double() - ref).abs().max() / ref.abs().max())
        for label in [v for v in found if v != "base"]:
            y = run(compiled_kernel(found[label]), x, qw, M, N, K)
            same = bool(torch.equal(y, base))
            verr = float((y.double() - ref).abs().max() / ref.abs().max())
            print(f"check {name} {M}x{N}x{K} {label}: "
                  f"{'bitwise equal' if same else 'DIFFERS'} (rel err {verr:.2e}, base "
                  f"{err:.2e})", flush=True)
            if not same:
                del found[label]
for rnd in range(rounds):
    time_variants(lambda wdtype: programs[wdtype.name], out, shapes, dtypes,
                  tag={"round": rnd}, min_reps=50, cublas=True)
