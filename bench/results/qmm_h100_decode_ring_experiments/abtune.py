# usage: abtune.py OUT.jsonl DTYPES MS SHAPES -> same lease: tuned over the old candidates
# (schedule_head.py beside this script: `git show c65e54e:kernels/schedule.py`) vs the new
# (with the ring kernel); each winner timed twice, interleaved, read flush
import importlib.util
import json
import os
import sys
from dataclasses import asdict

import torch

from tilevm.bench.qmm import Timer
from tilevm.kernels import matmul
from tilevm.kernels.matmul import quantized_matmul
from tilevm.kernels.schedule import Schedule, candidates
from tilevm.kernels.weights import quantize

spec = importlib.util.spec_from_file_location(
    "schedule_head", os.path.join(os.path.dirname(__file__), "schedule_head.py"))
head = importlib.util.module_from_spec(spec)
sys.modules["schedule_head"] = head
spec.loader.exec_module(head)
SHAPES = {"8b.qkv": (12288, 4096), "70b.qkv": (10240, 8192), "70b.o": (8192, 8192),
          "70b.gate_up": (57344, 8192), "70b.down": (8192, 28672)}


def old(M, N, K, g, hopper=False, bits=4):
    return [Schedule(**asdict(s)) for s in head.candidates(M, N, K, g, hopper=hopper)]


out, dts = sys.argv[1], sys.argv[2].split(",")
ms, shapes = [int(m) for m in sys.argv[3].split(",")], sys.argv[4].split(",")
timer = Timer(min_reps=60, l2_flush="read")
f = open(out, "a")
for sh in shapes:
    N, K = SHAPES[sh]
    torch.manual_seed(0)
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    for M in ms:
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        for wd in dts:
            qw = quantize(w, wd, 128, format="fragments")
            picks = {}
            for name, cands in (("old", old), ("new", candidates)):
                matmul.candidates = cands
                picks[name] = matmul.tune(x, qw)[0]
            matmul.candidates = candidates
            us = {k: [] for k in picks}
            for _ in range(2):
                for k, s in picks.items():
                    us[k].append(
                        timer(lambda x=x, qw=qw, s=s: quantized_matmul(x, qw, schedule=s))[0] * 1e6)
            rec = dict(shape=sh, M=M, dtype=wd, **{k: round(min(v), 2) for k, v in us.items()},
                       **{k + "_sched": str(s) for k, s in picks.items()})
            print(json.dumps(rec), flush=True)
            f.write(json.dumps(rec) + "\n")
            f.flush()
