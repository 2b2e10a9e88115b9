"""overlap.py OUT ROUNDS DTYPES: the dequantize-then-multiply pair with its weights cut
into C column chunks, chunk c + 1 dequantized on a second stream while chunk c is
multiplied (the matmul leaves an SM room for dequantize blocks: 1 block of 193 KB and
158 registers x 256 threads). Variants at M = 4096, f16, read flush, 30 runs a cell:

- `pair`: as `kernels.matmul` runs it (one dequantize, one matmul);
- `seqC`: C chunks, all on one stream (what cutting alone costs: smaller grids);
- `overC`: C chunks, dequantize c + 1 on the side stream during matmul c;
- `shared`: the shared-weights kernel (the tuner's other candidate);
- `cublas`: f16 on the same shape.

Each chunk is quantized on its own (groups run along K, so a column's codes and scales
are the same as in the whole matrix) and writes its own y; the chunks' outputs are
checked equal to the pair's, column for column."""
# ruff: noqa: B023, E702
import json
import sys

import torch

from tilevm.bench.qmm import SHAPES, Timer
from tilevm.kernels.matmul import _dequantizer, _qmm
from tilevm.kernels.schedule import dequant_schedule, shared_weights_tiles
from tilevm.kernels.weights import quantize

out, rounds, dtypes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
timer = Timer(min_reps=30, l2_flush="read")
ds = dequant_schedule()
sw = shared_weights_tiles(128)[0]
M = 4096


def pair_fns(x, qws, ys, overlap):
    """One function launching the chunks' pairs (side stream for dequantize c >= 1)."""
    K = x.shape[1]
    deq = [_dequantizer(q) for q in qws]
    mm = [_qmm(q, ds, q.shape[1]) for q in qws]
    wts = [torch.empty(q.scales.shape[1], K, dtype=x.dtype, device="cuda") for q in qws]
    side = torch.cuda.Stream()

    def run():
        main = torch.cuda.current_stream()
        events = []
        side.wait_stream(main)
        for c, q in enumerate(qws):
            where = side if overlap and c > 0 else main
            with torch.cuda.stream(where):
                deq[c](q.packed, q.scales, q.scales, wts[c], q.shape[1], K)
                events.append(where.record_event())
        for c, q in enumerate(qws):
            main.wait_event(events[c])
            mm[c](x, wts[c], ys[c], M, q.shape[1], K)
        main.wait_stream(side)
    return run


with open(out, "a") as f:
    for rnd in range(rounds):
        for shape in ("8b.qkv", "70b.qkv", "70b.o", "70b.gate_up", "70b.down"):
            N, K = SHAPES[shape]
            torch.manual_seed(0)
            w = torch.randn(K, N, device="cuda", dtype=torch.float16)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            for name in dtypes:
                qw = quantize(w, name, 128, format="fragments")
                y = torch.empty(M, N, device="cuda", dtype=torch.float16)
                fns = {"pair": pair_fns(x, [qw], [y], False)}
                shared = _qmm(qw, sw, N)
                fns["shared"] = lambda: shared(x, qw.packed, qw.scales, qw.scales, y, M, N, K)
                fns["cublas"] = lambda: torch.matmul(x, w, out=y)
                chunk_ys = {}
                for C in (2, 4):
                    n = N // C
                    qws = [quantize(w[:, c * n:(c + 1) * n].contiguous(), name, 128,
                                    format="fragments") for c in range(C)]
                    ys = [torch.empty(M, n, device="cuda", dtype=torch.float16)
                          for _ in range(C)]
                    chunk_ys[C] = ys
                    fns[f"seq{C}"] = pair_fns(x, qws, ys, False)
                    fns[f"over{C}"] = pair_fns(x, qws, ys, True)
                fns["pair"](); torch.cuda.synchronize()
                ref = y.clone()
                for C, ys in chunk_ys.items():
                    for label in (f"seq{C}", f"over{C}"):
                        for t in ys:
                            t.fill_(float("nan"))
                        fns[label](); torch.cuda.synchronize()
                        assert torch.equal(torch.cat(ys, 1), ref), (shape, name, label)
                us = {label: round(timer(fn)[0] * 1e6, 1) for label, fn in fns.items()}
                row = {"round": rnd, "shape": shape, "dtype": name, "us": us}
                print(json.dumps({**row, "ratio": {k: round(v / us["pair"], 3)
                                                   for k, v in us.items()}}), flush=True)
                f.write(json.dumps(row) + "\n")
