"""deepen_ab.py OUT SHAPES DTYPES: at M = 16, do the weights three k-tiles ahead
(`schedule.deepen`: prefetch 3, unroll 2), which the tuner offers only up to 8 rows, pay?

Per (layer, type): every current candidate (`schedule.candidates`) and the swapped
kernel's deepened schedules (2 and 4 warps, each split of the 16-row candidates) are
compiled and timed in interleaved rounds as the tuner does (20 rounds, a 64 MB write
between runs); then the best of the current set and the best deepened one are timed with
the benchmark's timer (L2 read flush and write flush, at least 100 runs). One JSON row
per (layer, type)."""

import json
import sys
from dataclasses import asdict

import torch

from tilevm.bench.qmm import SHAPES, Timer
from tilevm.dtypes import parse
from tilevm.kernels import matmul
from tilevm.kernels.schedule import Schedule, candidates, deepen, swap_rows
from tilevm.kernels.weights import quantize

M = 16


def deepened(K: int, group_size: int) -> list[Schedule]:
    out = []
    for warps in (2, 4):
        for split in (1, 2, 4, 6, 8):
            s = deepen(Schedule(swap_rows(M), 64, warps, split, swap_ab=True), K, group_size)
            if s.prefetch == 3 and s.fits(K, group_size):
                out.append(s)
    return out


def rounds(x, qw, y, todo, reps=20):
    flush = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    for s in todo:
        matmul._launch(x, qw, y, s)
    torch.cuda.synchronize()
    times = [[] for _ in todo]
    for _ in range(reps):
        for i, s in enumerate(todo):
            flush.zero_()
            torch.cuda._sleep(200_000)
            begin, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            begin.record()
            matmul._launch(x, qw, y, s)
            end.record()
            end.synchronize()
            times[i].append(begin.elapsed_time(end) * 1e3)
    return [sorted(t)[len(t) // 2] for t in times]


def main(out, shapes, dtypes):
    timers = {f: Timer(min_reps=100, l2_flush=f) for f in ("read", "write")}
    with open(out, "a") as f:
        for shape in shapes:
            N, K = SHAPES[shape]
            torch.manual_seed(0)
            w = torch.randn(K, N, device="cuda", dtype=torch.float16)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            y = torch.empty(M, N, device="cuda", dtype=torch.float16)
            for name in dtypes:
                qw = quantize(w, parse(name), 128, format="fragments")
                ref = (x.float() @ qw.dequantize().float())
                now = candidates(M, N, K, 128, hopper=True)
                deep = deepened(K, 128)
                us = rounds(x, qw, y, now + deep)
                best_now = min(range(len(now)), key=lambda i: us[i])
                best_deep = len(now) + min(range(len(deep)), key=lambda i: us[len(now) + i])
                row = {"shape": shape, "dtype": name, "M": M}
                for label, i in (("now", best_now), ("deep", best_deep)):
                    s = (now + deep)[i]
                    y.fill_(float("nan"))
                    matmul._launch(x, qw, y, s)
                    torch.cuda.synchronize()
                    err = float((y.float() - ref).abs().max() / ref.abs().max())
                    args = (x, qw, y, s)
                    row[label] = {"schedule": asdict(s), "tuner_us": round(us[i], 2),
                                  "rel_err": err, **{
                                      f"{fl}_us": round(t(lambda a=args: matmul._launch(
                                          *a))[0] * 1e6, 2)
                                      for fl, t in timers.items()}}
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","))
