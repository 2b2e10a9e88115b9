"""Experiment (issue 48): ncu on tilevm's and Humming's int4 kernels at M = 64/256
(8B qkv, 8B down). Run under `ncu --profile-from-start off`."""
import sys
import torch
from tilevm.bench.weights import make_weights
from tilevm.bench.tilevm_adapter import tilevm_matmul_factory
from tilevm.bench.baselines import humming_factory, peer_status

CELLS = [(12288, 4096, 64), (4096, 14336, 64), (4096, 14336, 256)]
which = sys.argv[1]
if which == "humming":
    print(peer_status("humming"))
g = torch.Generator(device="cuda"); g.manual_seed(0)
for N, K, M in CELLS:
    w = make_weights("int4", 128, N, K, g)
    prep = (tilevm_matmul_factory("int4", 128, "f16", M, N, K, w) if which == "tilevm"
            else humming_factory(w, "f16", M))
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    for _ in range(3):
        prep.fn(x)
    torch.cuda.synchronize()
    print(which, N, K, M, prep.compile.get("schedule", prep.note), flush=True)
    torch.cuda.cudart().cudaProfilerStart()
    prep.fn(x)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
