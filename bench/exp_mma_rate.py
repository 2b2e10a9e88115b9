"""Experiment (issue 45): the tensor-core rate a `dot` of register operands reaches on
Hopper (it lowers to the warp-level `mma.sync`, where a dot with a shared `b` lowers to
`wgmma`), against the table's dense peak (`GPU.tensor_peak`, which the cost model
charges every dot) and cuBLAS's f16 matmul. Offline, charging register dots 0.6-0.7x
of the peak put the predicted best within 10% on 15 of the 16 problems at M = 64/256
(12 at 1.0; bench/results/cost_rank_mma_sync_offline_3b64159.txt, docs/experiments.md):
this measures the factor.

Each block loads one a[bm, bk] and b[bk, bn] tile into registers, then runs `reps`
dots into an f32 accumulator it stores at the end; blocks cover the SMs several times
over. One JSON line a measurement."""
import json

import torch

from tilevm.backend.launch import compiled_kernel
from tilevm.cost.hardware import GPUS
from tilevm.vm import lang as tv


def dot_loop_kernel(warps: int):
    """The loop of dots on register tiles, `warps` warps a block."""
    @tv.kernel(num_warps=warps)
    def dot_loop(a: tv.ptr(tv.f16, const=True), b: tv.ptr(tv.f16, const=True),
                 c: tv.ptr(tv.f32), reps: tv.int32, blocks: tv.int32, *, bm: int = 64,
                 bn: int = 64, bk: int = 32):
        tv.grid(blocks)
        ta = tv.load_global(tv.global_view(a, [bm, bk]), [0, 0], [bm, bk])
        tb = tv.load_global(tv.global_view(b, [bk, bn]), [0, 0], [bk, bn])
        acc = tv.zeros([bm, bn], tv.f32)
        for _ in tv.range(0, reps, 1):
            acc = tv.dot(ta, tb, acc)
        tv.store_global(tv.global_view(c, [blocks * bm, bn]), acc, [tv.block_idx(0) * bm, 0])
    return dot_loop


def events_us(run, times: int = 7) -> float:
    run()
    torch.cuda.synchronize()
    out = []
    for _ in range(times):
        b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        b.record()
        run()
        e.record()
        e.synchronize()
        out.append(b.elapsed_time(e) * 1e3)
    return sorted(out)[len(out) // 2]


props = torch.cuda.get_device_properties(0)
table = GPUS["h200" if "H200" in props.name else "h100"]
sms = props.multi_processor_count
x = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
us = events_us(lambda: torch.matmul(x, x))
print(json.dumps({"kernel": "cublas 8192^3", "tflops": 2 * 8192 ** 3 / us / 1e6,
                  "table_peak_tflops": table.tensor_peak / 1e12}), flush=True)
for warps, bm, bn, bk in ((4, 64, 64, 32), (4, 64, 128, 32), (8, 128, 128, 32),
                          (4, 64, 64, 64)):
    kernel = compiled_kernel(dot_loop_kernel(warps).specialize(bm=bm, bn=bn, bk=bk))
    a = torch.randn(bm, bk, device="cuda", dtype=torch.float16)
    b = torch.randn(bk, bn, device="cuda", dtype=torch.float16)
    for per_sm in (1, 2, 4, 8):
        blocks, reps = per_sm * sms, 4096
        c = torch.empty(blocks * bm, bn, device="cuda", dtype=torch.float32)
        t = events_us(lambda k=kernel, a=a, b=b, c=c, r=reps, n=blocks: k(a, b, c, r, n))
        ref = (a.float() @ b.float()) * reps
        err = float((c[:bm] - ref).abs().max() / ref.abs().max())
        flops = 2 * bm * bn * bk * reps * blocks
        print(json.dumps({"kernel": "dot_loop", "warps": warps, "tile": [bm, bn, bk],
                          "blocks_per_sm": per_sm, "us": t, "tflops": flops / t / 1e6,
                          "of_table_peak": flops / t / 1e6 / (table.tensor_peak / 1e12),
                          "rel_err": err}), flush=True)
