"""Experiment (issue 45): the model's DRAM bytes against ncu's, for quantized-matmul
configurations. Run under ncu; prints one JSON line per configuration (the model)."""
import json, sys
import torch
from tilevm.kernels import quantize, quantized_matmul, default_schedule
from tilevm.kernels import matmul as mm
from tilevm.cost import hardware
from tilevm.cost.model import Resources, estimate

CONFIGS = [(12288, 4096, m) for m in (1, 16, 256, 4096)] + \
          [(4096, 14336, m) for m in (1, 16, 256, 4096)] + \
          [(57344, 8192, m) for m in (1, 16, 256)]
gpu = hardware.gpu("h100")
for N, K, M in CONFIGS:
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    qw = quantize(w, "int4", 128, format="fragments")
    del w
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    s = default_schedule(M, N, K, 128, hopper=True, bits=4)
    quantized_matmul(x, qw, schedule=s)  # warm (compile, load)
    torch.cuda.synchronize()
    quantized_matmul(x, qw, schedule=s)  # the measured launch
    torch.cuda.synchronize()
    programs = [mm._program(qw, s, N)]
    kernels = [mm._qmm(qw, s, N)]
    if s.dequant:
        programs.insert(0, mm._dequantizer_program(qw)); kernels.insert(0, mm._dequantizer(qw))
    for program, kernel in zip(programs, kernels):
        regs = kernel.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS")
        e = estimate(program, {"M": M, "N": N, "K": K}, gpu,
                     Resources(kernel.num_threads, regs, kernel.shared_bytes))
        print(json.dumps({"N": N, "K": K, "M": M, "kernel": program.name,
                          "schedule": str(s), "dram": e.traffic.dram,
                          "moved": dict(e.traffic.total), "issued": dict(e.traffic.issued),
                          "predicted_us": e.predicted_s * 1e6, "bound_us": e.bound_s * 1e6,
                          "term": e.bound_term, "approximate": e.traffic.approximate}),
              flush=True)
    del qw, x
    torch.cuda.empty_cache()
