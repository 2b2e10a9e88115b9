"""Experiment (issue 45): every tuning candidate of the quantized matmul timed (as the
tuner times them) beside the model's prediction. One JSON line per candidate."""
import json, statistics, sys, time
import torch
from tilevm.kernels import quantize, candidates
from tilevm.kernels import matmul as mm
from tilevm.cost import hardware
from tilevm.cost.model import Resources, estimate

SHAPES = [(12288, 4096), (4096, 14336), (57344, 8192)]
MS = [int(m) for m in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1, 16, 64, 256]
gpu = hardware.gpu("h100")
flush = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
for N, K in SHAPES:
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    qw = quantize(w, "int4", 128, format="fragments")
    del w
    for M in MS:
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        y = torch.empty(M, N, device="cuda", dtype=torch.float16)
        todo = candidates(M, N, K, 128, hopper=True, bits=4)
        mm._prebuild(qw, todo, N)
        stream = torch.cuda.current_stream().cuda_stream
        plans = [mm._plan(x, qw, y, s, stream, (M, N)) for s in todo]
        for plan in plans:
            mm._run(plan, x.data_ptr(), stream, y)
        torch.cuda.synchronize()
        times = [[] for _ in todo]
        for _ in range(15):
            for i, s in enumerate(todo):
                flush.zero_()
                torch.cuda._sleep(int(2e9 * 100e-6))
                b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                b.record(); mm._run(plans[i], x.data_ptr(), stream, y); e.record(); e.synchronize()
                times[i].append(b.elapsed_time(e) * 1e3)
        for s, t in zip(todo, times):
            progs = [(mm._program(qw, s, N), mm._qmm(qw, s, N))]
            if s.dequant:
                progs.insert(0, (mm._dequantizer_program(qw), mm._dequantizer(qw)))
            pred = bound = dram = 0.0
            terms = []
            for program, kernel in progs:
                r = Resources(kernel.num_threads, kernel.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"),
                              kernel.shared_bytes)
                names = {p.name for p in program.params}
                est = estimate(program, {k: v for k, v in {"M": M, "N": N, "K": K}.items()
                                         if k in names}, gpu, r)
                pred += est.predicted_s * 1e6; bound += est.bound_s * 1e6; dram += est.traffic.dram
                terms.append([est.bound_term, est.occupancy.blocks_per_sm, est.waves.waves,
                              est.blocks, r.registers_per_thread, r.shared_bytes])
            print(json.dumps({"N": N, "K": K, "M": M, "schedule": str(s),
                              "measured_us": statistics.median(t), "predicted_us": pred,
                              "bound_us": bound, "dram": dram, "terms": terms}), flush=True)
        del x, y
    del qw
    torch.cuda.empty_cache()
