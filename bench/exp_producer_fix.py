"""Experiment (issues 48, 45): the producer-warp kernels after 1e4029f (every inline-PTX
call convergent: LLVM no longer copies their `bar.warp.sync` into lane 0's branch, which
ptxas ran through WARPSYNC.COLLECTIVE). Before it the producer warp made the register-A
kernel 1.7-2.2x slower (qmm_cluster_diag_h200_5bc3efd.jsonl) and neither the producer
nor the x-sharing cluster made the dequant pair's matmul faster.

Part A, between decode and prefill (int4, graph over weight copies larger than L2): the
register-A kernel unsplit, alone and as clusters of 2 and 4 column tiles sharing x
(`cluster_n`: a producer warp multicasting x), beside the matrix run's best schedule.
Part B, prefill: the dequant pair's matmul (`wt_matmul`, f16 weights, M = 4096) plain,
with the producer warp, and with clusters of 2 sharing x, and the persistent matmul of
tests/programs (a block an SM, the producer copying the next tile's k-tiles while the
others store), against cuBLAS f16. Part C,
prefill: the shared-weights kernel (int4) with a converting producer warpgroup, and as
clusters of 2 or 4 column tiles sharing x (a copying producer warpgroup multicasts it). Part D,
int3 between decode and prefill (its odd width has no half atoms): two warpgroups on
pairs of k-tiles of whole atoms (`pair_k`, 128 columns; possible since c242b48) beside
the matrix run's pick; and the same for int4 on two cells. Part E, decode on the 70B
layers: the streaming kernel with more weight bytes in flight (codes 1-4 k-tiles ahead,
4 or 8 warps), since int8 reads 70B gate_up at 103% of the copy's rate and int4 at 83%.
One JSON line a measurement on stdout."""
import importlib.util
import json
import statistics
import sys

import torch

from tilevm.backend.launch import compiled_kernel
from tilevm.kernels import matmul_launch as ml
from tilevm.kernels import quantize
from tilevm.kernels.qmm_dequant import wt_matmul_kernel
from tilevm.kernels.schedule import Schedule, wgmma

_spec = importlib.util.spec_from_file_location(  # the persistent matmul the tests keep
    "persistent_wgmma_kernels", "tests/programs/persistent_wgmma_kernels.py")
_programs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_programs)
persistent_kernel = _programs.persistent_kernel
L2 = torch.cuda.get_device_properties(0).L2_cache_size
PARTS = sys.argv[1] if len(sys.argv) > 1 else "ABCDE"


def replay_us(run, calls: int) -> float:
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        run(0, stream.cuda_stream)
    stream.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for i in range(calls):
            run(i, stream.cuda_stream)
    g.replay()
    torch.cuda.synchronize()
    t = []
    for _ in range(9):
        b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        b.record()
        g.replay()
        e.record()
        e.synchronize()
        t.append(b.elapsed_time(e) * 1e3 / calls)
    return statistics.median(t)


def part_a(name, N, K, M, best):
    bm = 64 if M <= 64 else 128
    time_schedules("A", name, N, K, M, [best] + [
        wgmma(bm, 4, 4, 128, lead=2, prefetch=p, half_atoms=h, cluster_n=c)
        for h, p in ((True, 4), (False, 2)) for c in (1, 2, 4)])


def time_schedules(part, name, N, K, M, todo, wdtype="int4"):
    first = quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), wdtype, 128,
                     format="fragments")
    nbytes = first.packed.numel() + first.scales.numel() * 2
    copies = max(1, min(16, -(-3 * L2 // nbytes)))
    qws = [first] + [quantize(torch.randn(K, N, device="cuda", dtype=torch.float16),
                              wdtype, 128, format="fragments") for _ in range(copies - 1)]
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    ref = x.double() @ first.dequantize().double()
    todo = [s for s in dict.fromkeys(todo) if s.fits(K, 128)]
    ml.prebuild_schedules(first, todo, N)
    for s in todo:
        row = {"part": part, "layer": name, "N": N, "K": K, "M": M, "wdtype": wdtype,
               "schedule": str(s)}
        try:
            stream = torch.cuda.current_stream().cuda_stream
            out = ml.run_plan(ml.plan_call(x, first, y, s, stream, (M, N)), x.data_ptr(),
                              stream)
            torch.cuda.synchronize()
            row["rel_err"] = float((out.double() - ref).abs().max() / ref.abs().max())
            on = {}  # the plans for the capture's stream

            def run(i, stream, s=s, on=on):
                if stream not in on:
                    on[stream] = [ml.plan_call(x, q, y, s, stream, (M, N)) for q in qws]
                ml.run_plan(on[stream][i % copies], x.data_ptr(), stream, y)
            row["us"] = replay_us(run, max(20, 4 * copies))
        except Exception as e:  # noqa: BLE001 (a variant that fails is a finding)
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        print(json.dumps(row), flush=True)
    torch.cuda.empty_cache()


def part_b(name, N, K, M):
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    wts = [torch.randn(N, K, device="cuda", dtype=torch.float16) / 64
           for _ in range(max(1, min(4, -(-3 * L2 // (2 * N * K)))))]
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    ref = (x.float() @ wts[0].float().t())
    row = {"part": "B", "layer": name, "N": N, "K": K, "M": M, "variant": "cublas"}
    row["us"] = replay_us(lambda i, _: torch.matmul(x, wts[i % len(wts)].t(), out=y), 8)
    print(json.dumps(row), flush=True)

    def time_kernel(variant, program, *tail):
        """One f16 matmul kernel (`program()` specializes it) y = x W^T, checked, then
        timed over the copies of W."""
        row = {"part": "B", "layer": name, "N": N, "K": K, "M": M, "variant": variant}
        try:
            k = compiled_kernel(program())
            k(x, wts[0], y, M, N, K, *tail)
            torch.cuda.synchronize()
            row["rel_err"] = float((y.float() - ref).abs().max() / ref.abs().max())
            row["us"] = replay_us(lambda i, _: k(x, wts[i % len(wts)], y, M, N, K, *tail), 8)
            row["registers"] = k.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS")
        except Exception as e:  # noqa: BLE001 (a variant that fails is a finding)
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        print(json.dumps(row), flush=True)

    kernel = wt_matmul_kernel("f16")
    for producer, cluster, lead in ((False, 1, 2), (True, 1, 2), (True, 1, 3), (True, 2, 2),
                                    (True, 2, 3)):
        time_kernel(f"producer={producer} cluster={cluster} lead={lead}",
                    lambda p=producer, c=cluster, ld=lead: kernel.specialize(
                        bm=256, bk=64, num_warps=8, stages=4, lead=ld, producer=p, cluster=c,
                        wide_stores=True))
    # the persistent matmul with a producer warp (or a warpgroup keeping 40 registers)
    # of tests/programs, stored straight from the fragments: one block an SM
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for registers in (None, 40):
        time_kernel(f"persistent direct registers={registers} P={sms}",
                    lambda r=registers: persistent_kernel("f16", r).specialize(
                        stages=4, direct=True), sms)
    torch.cuda.empty_cache()


if "A" in PARTS:  # the matrix run's picks at eec0b94 (qmm_matrix_h200_eec0b94)
    for name, N, K, M, best in (
            ("8b.qkv", 12288, 4096, 64, wgmma(64, 4, 4, 128, lead=2, prefetch=4,
                                              half_atoms=True, split_k=2)),
            ("70b.qkv", 10240, 8192, 64, wgmma(64, 4, 4, 128, lead=2, prefetch=4,
                                               half_atoms=True, split_k=3)),
            ("70b.gate_up", 57344, 8192, 64, wgmma(64, 4, 4, 128, lead=2, prefetch=2)),
            ("8b.down", 4096, 14336, 256, wgmma(128, 4, 4, 128, lead=2, prefetch=4,
                                                half_atoms=True, split_k=2)),
            ("70b.o", 8192, 8192, 256, wgmma(256, 8, 4, 128, lead=2, prefetch=2,
                                             half_atoms=True, split_k=2))):
        part_a(name, N, K, M, best)
if "B" in PARTS:
    for name, N, K in (("8b.qkv", 12288, 4096), ("70b.gate_up", 57344, 8192),
                       ("70b.down", 8192, 28672)):
        part_b(name, N, K, 4096)
if "C" in PARTS:  # prefill's shared-weights kernel (the pick for int4 at M = 4096) with
    # a converting producer warpgroup of R registers a thread
    for name, N, K in (("8b.qkv", 12288, 4096), ("70b.gate_up", 57344, 8192)):
        time_schedules("C", name, N, K, 4096, [
            wgmma(256, 8, 4, 128, lead=2, prefetch=p, shared_weights=True, producer=r)
            for p, r in ((4, 0), (2, 0), (2, 96), (2, 120))] + [
            wgmma(256, 8, 4, 128, lead=2, prefetch=p, shared_weights=True, cluster_n=c)
            for p in (4, 2) for c in (2, 4)])
if "D" in PARTS:  # int3's picks in the matrix run at eec0b94, then whole-atom pairs
    for name, N, K, M, best in (
            ("8b.qkv", 12288, 4096, 64, wgmma(64, 4, 4, 128, lead=2, prefetch=2, split_k=2)),
            ("70b.gate_up", 57344, 8192, 64, wgmma(64, 4, 4, 128, lead=2, prefetch=2,
                                                   split_k=2)),
            ("8b.down", 4096, 14336, 256, wgmma(128, 4, 4, 128, lead=2, prefetch=2,
                                                split_k=2)),
            ("8b.o", 4096, 4096, 256, wgmma(64, 4, 4, 128, lead=2, prefetch=2, split_k=2))):
        bms = (32, 64) if M <= 64 else (64, 128)
        time_schedules("D", name, N, K, M, [best] + [
            wgmma(bm, 8, 4, 128, lead=2, prefetch=2, pair_k=True, split_k=k)
            for bm in bms for k in (1, 2)], wdtype="int3")
    # int4 too: whole-atom pairs read x for 128 columns at a time (half the L2 traffic of
    # the 64-column half-atom tiles the matrix run picked)
    for name, N, K, M, best in (
            ("8b.qkv", 12288, 4096, 64, wgmma(64, 4, 4, 128, lead=2, prefetch=4,
                                              half_atoms=True, split_k=2)),
            ("8b.down", 4096, 14336, 256, wgmma(128, 4, 4, 128, lead=2, prefetch=4,
                                                half_atoms=True, split_k=2))):
        bms = (32, 64) if M <= 64 else (64, 128)
        time_schedules("D", name, N, K, M, [best] + [
            wgmma(bm, 8, 4, 128, lead=2, prefetch=2, pair_k=True, split_k=k)
            for bm in bms for k in (1, 2)])
if "E" in PARTS:  # the matrix run's picks at M = 1: 4 warps, K split 8
    for name, N, K, wdtype in (("70b.gate_up", 57344, 8192, "int4"),
                               ("70b.down", 8192, 28672, "int4"),
                               ("70b.down", 8192, 28672, "f6e3m2")):
        time_schedules("E", name, N, K, 1, [
            Schedule(8, 64, w, 8, prefetch=p, unroll=u, swap_ab=True)
            for w in (4, 8) for p, u in ((1, 1), (2, 1), (3, 2), (4, 1), (4, 2))],
            wdtype=wdtype)
