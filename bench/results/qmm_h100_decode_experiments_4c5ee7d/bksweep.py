# usage: bksweep.py OUT.jsonl DTYPES SHAPES M
# -> times of bk=64 and bk=128 swapped decode schedules (bench Timer, write flush)
import json
import sys

import torch

from tilevm.bench.qmm import SHAPES, Timer
from tilevm.kernels.matmul import quantized_matmul
from tilevm.kernels.schedule import Schedule
from tilevm.kernels.weights import quantize

timer = Timer(min_reps=30)
f = open(sys.argv[1], "a")
M = int(sys.argv[4])
bm = 8 if M <= 8 else 16
for sh in sys.argv[3].split(","):
    N, K = SHAPES[sh]
    for wd in sys.argv[2].split(","):
        torch.manual_seed(0)
        w = torch.randn(K, N, device="cuda", dtype=torch.float16)
        qw = quantize(w, wd, 128, format="fragments")
        wf = qw.dequantize().cuda().double()
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        ref = x.double() @ wf
        for bk, un in ((64, 1), (128, 2)):
            for nw in (2, 4):
                for sk in (1, 2, 4, 8, 16):
                    for pf in (1, 2) if bk == 128 else (1,):
                        s = Schedule(
                            bm=bm,
                            bk=bk,
                            num_warps=nw,
                            split_k=sk,
                            swap_ab=True,
                            unroll=un,
                            prefetch=pf,
                        )
                        if (
                            not s.fits(K, 128)
                            or (-(-N // (32 * nw))) * sk > 8 * 132
                            or (-(-N // (32 * nw))) * sk < 132
                        ):
                            continue
                        try:
                            y = quantized_matmul(x, qw, schedule=s)
                            torch.cuda.synchronize()
                        except Exception as e:
                            print("fail", s, e)
                            continue
                        err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
                        t = timer(lambda x=x, qw=qw, s=s: quantized_matmul(x, qw, schedule=s))[0]
                        rec = dict(
                            shape=sh, wd=wd, M=M, sched=str(s), us=round(t * 1e6, 2), err=err
                        )
                        print(json.dumps(rec), flush=True)
                        f.write(json.dumps(rec) + "\n")
