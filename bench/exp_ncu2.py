"""Experiment (issue 45): ncu's DRAM bytes for quantized-matmul configurations (working
sets larger than L2), the matmul example and the attention example. Run under
`ncu --profile-from-start off`: only the launch between profiler start and stop is
profiled. Prints one JSON line per launch (the kernels' resources, for the model offline)."""
import json
import torch
import tilevm as tv
from tilevm.bench.examples import load_example
from tilevm.kernels import quantize, quantized_matmul, default_schedule
from tilevm.kernels import matmul as mm

CONFIGS = [("int4", 57344, 8192, m) for m in (1, 16, 256, 4096)] + \
          [("int4", 8192, 28672, m) for m in (1, 16, 256, 4096)] + \
          [("int4", 28672, 4096, m) for m in (1, 16, 4096)] + \
          [("int4", 12288, 4096, 4096), ("int3", 57344, 8192, 1), ("int3", 57344, 8192, 16),
           ("int3", 8192, 28672, 256)]


def resources(k):
    return {"threads": k.num_threads, "regs": k.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"),
            "shared": k.shared_bytes}


for wt, N, K, M in CONFIGS:
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    qw = quantize(w, wt, 128, format="fragments")
    del w
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    s = default_schedule(M, N, K, 128, hopper=True, bits=qw.dtype.bits)
    quantized_matmul(x, qw, schedule=s)  # warm (compile, load)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    quantized_matmul(x, qw, schedule=s)  # the measured launch
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    kernels = [resources(mm._qmm(qw, s, N))]
    if s.dequant:
        kernels.insert(0, resources(mm._dequantizer(qw)))
    print(json.dumps({"wdtype": wt, "N": N, "K": K, "M": M, "schedule": str(s),
                      "kernels": kernels}), flush=True)
    del qw, x
    torch.cuda.empty_cache()


def run_example(name, kernel, constants, args):
    compiled = tv.compile(kernel, **constants)
    compiled(*args)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    compiled(*args)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(json.dumps({"example": name, "constants": constants,
                      "kernels": [resources(compiled)]}), flush=True)


n = 4096
a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
c = torch.empty(n, n, device="cuda", dtype=torch.float16)
run_example("matmul", load_example("matmul").matmul, {}, [a, b, c, n, n, n])
del a, b, c
att = load_example("attention").attention
for S, BH, causal in ((4096, 32, False), (4096, 32, True), (16384, 16, False)):
    q, k, v = (torch.randn(BH, S, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    run_example(f"attention S={S} BH={BH}", att,
                {"d": 128, "causal": causal, "block_q": 128, "block_kv": 64,
                 "num_warps": 8}, [q, k, v, o, S, BH])
