"""Experiment (issue 45): every tuning candidate of the quantized matmul timed as the
tuner times it, on shapes the model's constants were not fitted on. One JSON line per
candidate with its kernels' resources (the model's predictions are computed offline)."""
import json, statistics, sys
import torch
from tilevm.kernels import quantize, candidates
from tilevm.kernels import matmul as mm

PROBLEMS = [(4096, 4096, m) for m in (4, 32, 128, 2048)] + \
           [(10240, 8192, m) for m in (4, 32, 128)] + \
           [(8192, 28672, m) for m in (4, 32, 128, 1024)]
if len(sys.argv) > 1 and sys.argv[1] == "prefill":
    PROBLEMS = [(N, K, 4096) for N, K in [(12288, 4096), (4096, 4096), (28672, 4096),
                (4096, 14336), (10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672)]] + \
               [(12288, 4096, 512), (57344, 8192, 512), (4096, 14336, 512)]
elif len(sys.argv) > 1:
    PROBLEMS = PROBLEMS[int(sys.argv[1]):int(sys.argv[2])]
flush = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")


def resources(k):
    return [k.num_threads, k.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"), k.shared_bytes]


weights = {}
for N, K, M in PROBLEMS:
    if (N, K) not in weights:
        weights.clear()
        torch.cuda.empty_cache()
        w = torch.randn(K, N, device="cuda", dtype=torch.float16)
        weights[(N, K)] = quantize(w, "int4", 128, format="fragments")
        del w
    qw = weights[(N, K)]
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
        ks = [resources(mm._qmm(qw, s, N))]
        if s.dequant:
            ks.insert(0, resources(mm._dequantizer(qw)))
        print(json.dumps({"N": N, "K": K, "M": M, "schedule": str(s),
                          "measured_us": statistics.median(t),
                          "spread_us": [min(t), max(t)], "kernels": ks}), flush=True)
    del x, y
