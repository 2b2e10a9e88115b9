# usage: decab3.py ROOT OUT.jsonl DTYPES SHAPES MS [default]
# -> default and tuned timings of the package at ROOT (bench Timer, write flush);
#    with "default", the default schedules only (and their names), nothing tuned
import importlib.util
import json
import sys

root, out = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location(
    "tilevm", f"{root}/__init__.py", submodule_search_locations=[root]
)
m = importlib.util.module_from_spec(spec)
sys.modules["tilevm"] = m
spec.loader.exec_module(m)
import torch  # noqa: E402

from tilevm.bench.qmm import SHAPES, Timer  # noqa: E402
from tilevm.kernels.matmul import quantized_matmul, tuned_schedule  # noqa: E402
from tilevm.kernels.schedule import default_schedule  # noqa: E402
from tilevm.kernels.weights import quantize  # noqa: E402

timer = Timer(min_reps=50)
modes = (
    (("default", False),) if sys.argv[6:] == ["default"] else (("default", False), ("tuned", True))
)
f = open(out, "a")
for sh in sys.argv[4].split(","):
    N, K = SHAPES[sh]
    for wd in sys.argv[3].split(","):
        torch.manual_seed(0)
        w = torch.randn(K, N, device="cuda", dtype=torch.float16)
        qw = quantize(w, wd, 128, format="fragments")
        wf = qw.dequantize().cuda().double()
        for M in map(int, sys.argv[5].split(",")):
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            ref = x.double() @ wf
            rec = dict(root=root.rstrip("/").split("/")[-1], shape=sh, wd=wd, M=M)
            for name, tune in modes:
                y = quantized_matmul(x, qw, tune=tune)
                torch.cuda.synchronize()
                rec[name + "_err"] = ((y.double() - ref).abs().max() / ref.abs().max()).item()
                rec[name] = round(
                    timer(lambda x=x, qw=qw, tune=tune: quantized_matmul(x, qw, tune=tune))[0]
                    * 1e6,
                    2,
                )
            if len(modes) == 1:
                rec["sched"] = str(default_schedule(M, N, K, 128, hopper=True))
            else:
                rec["sched"] = str(tuned_schedule(x, qw))
            print(json.dumps(rec), flush=True)
            f.write(json.dumps(rec) + "\n")
