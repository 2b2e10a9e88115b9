"""decode_ab.py ROOT TAG OUT DTYPES SHAPES MS: `quantized_matmul` at M rows (bench Timer,
write flush, 50 runs) with tilevm imported from ROOT (a tree); rows tagged tree=TAG and
cap=$TILEVM_MINCTASM (the scratch trees' codegen added `.minnctapersm` to the decode
kernel when that variable was set; main has no such switch). TUNE=1: the tuned schedule
(the tree's own tuning table), else the default one."""
import importlib.util
import json
import os
import sys

root, tag, out = sys.argv[1:4]
spec = importlib.util.spec_from_file_location("tilevm", f"{root}/__init__.py",
                                              submodule_search_locations=[root])
module = importlib.util.module_from_spec(spec)
sys.modules["tilevm"] = module
spec.loader.exec_module(module)

import torch  # noqa: E402

from tilevm.bench.qmm import SHAPES, Timer  # noqa: E402
from tilevm.kernels.matmul import quantized_matmul, tuned_schedule  # noqa: E402
from tilevm.kernels.weights import quantize  # noqa: E402

TUNE = os.environ.get("TUNE") == "1"
timer = Timer(min_reps=50)
cap = os.environ.get("TILEVM_MINCTASM", "0")
with open(out, "a") as f:
    for shape in sys.argv[5].split(","):
        N, K = SHAPES[shape]
        torch.manual_seed(0)
        w = torch.randn(K, N, device="cuda", dtype=torch.float16)
        for wd in sys.argv[4].split(","):
            qw = quantize(w, wd, 128, format="fragments")
            for M in map(int, sys.argv[6].split(",")):
                torch.manual_seed(1)
                x = torch.randn(M, K, device="cuda", dtype=torch.float16)
                y = quantized_matmul(x, qw, tune=TUNE)
                torch.cuda.synchronize()
                us = timer(lambda x=x, qw=qw: quantized_matmul(x, qw, tune=TUNE))[0]
                row = {"tree": tag, "cap": cap, "shape": shape, "dtype": wd, "M": M,
                       "us": round(us * 1e6, 2), "sum": float(y.double().sum()),
                       "tune": TUNE, "sched": str(tuned_schedule(x, qw)) if TUNE else ""}
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")
