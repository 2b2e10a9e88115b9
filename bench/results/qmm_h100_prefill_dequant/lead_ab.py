"""lead_ab.py OUT SHAPES DTYPES ROOT: lead 3 (x three k-tiles ahead, 4 stages) against lead 2 in the
shared-weights kernel and the f16 GEMM (tree .scratch/s18/sl: the assert relaxed)."""
# ruff: noqa: B023, E402, E501, E702
import importlib.util
import json
import sys

root = sys.argv[4]  # a tree with shared_lead.patch
spec = importlib.util.spec_from_file_location("tilevm", f"{root}/__init__.py", submodule_search_locations=[root])
m = importlib.util.module_from_spec(spec); sys.modules["tilevm"] = m; spec.loader.exec_module(m)
sys.path.insert(0, "bench/results/qmm_h100_prefill_dequant")
import torch
from experiment_kernels import gemm_kernel

from tilevm.backend.launch import compiled_kernel
from tilevm.bench.ab import time_variants
from tilevm.bench.qmm import SHAPES, Timer
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel


def variants(wd):
    k = qmm_wgmma_shared_kernel("f16")
    return {"lead2": k.specialize(wdtype=wd, group_size=128, prefetch=4),
            "lead3_resync": k.specialize(wdtype=wd, group_size=128, prefetch=4, lead=3, resync=True),
            "lead2_resync": k.specialize(wdtype=wd, group_size=128, prefetch=4, lead=2, resync=True)}

out = sys.argv[1]
shapes = sys.argv[2].split(",")
for rnd in range(2):
    time_variants(variants, out + "/resync_shared.jsonl", shapes, sys.argv[3].split(","))
    timer = Timer(min_reps=50, l2_flush="read")
    g = {f"l{L}{'r' if r else ''}": compiled_kernel(gemm_kernel("f16").specialize(lead=L, resync=r))
         for L, r in ((2, False), (3, True), (2, True))}
    with open(out + "/resync_gemm.jsonl", "a") as f:
        for shape in shapes:
            N, K = SHAPES[shape]; M = 4096
            torch.manual_seed(0)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
            y = torch.empty(M, N, device="cuda", dtype=torch.float16)
            us, sums = {}, {}
            us["cublas"] = timer(lambda: torch.matmul(x, wt.t(), out=y))[0] * 1e6
            for L, kern in g.items():
                kern(x, wt, y, M, N, K); torch.cuda.synchronize(); sums[L] = float(y.double().sum())
                us[L] = timer(lambda kern=kern: kern(x, wt, y, M, N, K))[0] * 1e6
            row = {"round": rnd, "shape": shape, "us": us, "sums": sums}
            print(json.dumps(row), flush=True); f.write(json.dumps(row) + "\n")
