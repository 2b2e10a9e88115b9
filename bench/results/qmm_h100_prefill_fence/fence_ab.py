"""fence_ab.py OUT SHAPES DTYPES: where the async-proxy fence goes in the Hopper kernels.

`sync` in a wgmma program lowers to `fence.proxy.async.shared::cta; bar.sync` (SASS:
`MEMBAR.ALL.CTA; FENCE.VIEW.ASYNC.S; BAR.SYNC`). The MEMBAR waits for the thread's
memory operations in flight, so in the shared-weights kernel the barrier of every k-tile
also waits for the codes loaded ahead in registers (ncu: the BAR and FENCE stall on the
long scoreboard). Variant `store`: the fence right after each `store_shared` (the only
generic writes a wgmma reads), none at `sync` unless a non-TMA `cp.async` wrote shared
memory. Variants are built in this process with the two lowerings patched."""

import contextlib
import sys

import llvmlite.ir as ir

import tilevm.backend.launch as launch
from tilevm.backend import runtime
from tilevm.backend.lowering import LOWERINGS
from tilevm.backend.lowering.barrier import emit_barrier
from tilevm.bench.ab import time_variants
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel


def _fence(cg):
    cg.b.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []),
                           "fence.proxy.async.shared::cta;", "", side_effect=True), [])


@contextlib.contextmanager
def fence_after_stores():
    sync, store = LOWERINGS["sync"], LOWERINGS["store_shared"]

    def lower_sync(cg, inst):
        if cg.wgmma is not None and (cg.tma is None or cg.tma.cp_async):
            _fence(cg)
        emit_barrier(cg)

    def lower_store_shared(cg, inst):
        store(cg, inst)
        if cg.wgmma is not None:
            _fence(cg)

    LOWERINGS["sync"], LOWERINGS["store_shared"] = lower_sync, lower_store_shared
    try:
        yield
    finally:
        LOWERINGS["sync"], LOWERINGS["store_shared"] = sync, store


_plain = launch.compiled_kernel


def compiled(variant, arch=None):
    kind, program = variant
    if kind != "store":
        return _plain(program)
    arch = launch.target.native_arch(runtime.device_arch())
    with fence_after_stores():
        artifact = launch.build_artifact(program, arch)
    return runtime.load_artifact(artifact)


launch.compiled_kernel = compiled


def variants(wdtype):
    ss = qmm_wgmma_shared_kernel("f16")
    p = ss.specialize(wdtype=wdtype, group_size=128, prefetch=4, wide_stores=True)
    q = ss.specialize(wdtype=wdtype, group_size=128, prefetch=4, wide_stores=True,
                      shared_codes=True)
    return {"base": ("base", p), "store": ("store", p), "scodes": ("base", q)}


def ragged(dtypes):
    """The variants' outputs on ragged shapes, bitwise against `base` (and the float64
    reference within tolerance)."""
    import torch

    from tilevm.dtypes import parse
    from tilevm.kernels.weights import dequantize, quantize

    for name in dtypes:
        wdtype = parse(name)
        for M, N, K in ((300, 200, 384), (4000, 4000, 1152), (2000, 6016, 4224),
                        (256, 1000, 128)):
            torch.manual_seed(1)
            w = torch.randn(K, N, device="cuda", dtype=torch.float16)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            qw = quantize(w, wdtype, 128, format="fragments")
            ref = x.double() @ dequantize(qw).double()
            outs = {}
            for label, v in variants(wdtype).items():
                y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
                compiled(v)(x, qw.packed, qw.scales, qw.scales, y, M, N, K)
                torch.cuda.synchronize()
                outs[label] = y
            err = float((outs["base"].double() - ref).abs().max() / ref.abs().max())
            same = {k: bool(torch.equal(v, outs["base"])) for k, v in outs.items()}
            print(f"ragged {name} {M}x{N}x{K}: rel err {err:.2e}, equal to base {same}",
                  flush=True)


def pair_matmul(out, shapes, M=4096):
    """The dequantize pair's f16 matmul (TMA copies only: `store` drops its fences)."""
    import json

    import torch

    from tilevm.bench.qmm import SHAPES, Timer
    from tilevm.kernels.qmm_dequant import wt_matmul_kernel

    timer = Timer(min_reps=30, l2_flush="read")
    p = wt_matmul_kernel("f16").specialize(wide_stores=True)
    with open(out, "a") as f:
        for shape in shapes:
            N, K = SHAPES[shape]
            torch.manual_seed(0)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
            y = torch.empty(M, N, device="cuda", dtype=torch.float16)
            us, sums = {}, {}
            for label in ("base", "store"):
                kernel = compiled((label, p))
                y.zero_()
                kernel(x, wt, y, M, N, K)
                torch.cuda.synchronize()
                sums[label] = float(y.double().sum())
                args = (x, wt, y, M, N, K)
                us[label] = round(timer(lambda k=kernel, a=args: k(*a))[0] * 1e6, 1)
            row = {"shape": shape, "dtype": "f16 (pair matmul)", "us": us, "sums": sums}
            print(json.dumps(row), flush=True)
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "ragged":
        ragged(sys.argv[2].split(","))
    elif sys.argv[1] == "pair":
        pair_matmul(sys.argv[2], sys.argv[3].split(","))
    else:
        time_variants(variants, sys.argv[1], sys.argv[2].split(","),
                      sys.argv[3].split(","))
