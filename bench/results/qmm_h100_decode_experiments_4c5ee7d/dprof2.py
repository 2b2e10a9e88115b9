# usage: dprof2.py DTYPE N K M tune|SCHEDJSON [reps]
# -> tune (prints the schedule as JSON), or run that schedule (for ncu)
import dataclasses
import json
import sys

import torch

from tilevm.kernels.matmul import quantized_matmul, tuned_schedule
from tilevm.kernels.schedule import Schedule
from tilevm.kernels.weights import quantize

wd, N, K, M = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
w = torch.randn(K, N, device="cuda", dtype=torch.float16)
qw = quantize(w, wd, 128, format="fragments")
x = torch.randn(M, K, device="cuda", dtype=torch.float16)
if sys.argv[5] == "tune":
    s = tuned_schedule(x, qw)
    print(json.dumps(dataclasses.asdict(s)))
    sys.exit()
s = Schedule(**json.loads(sys.argv[5]))
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
for _ in range(int(sys.argv[6]) if len(sys.argv) > 6 else 3):
    flush.zero_()
    quantized_matmul(x, qw, schedule=s)
torch.cuda.synchronize()
