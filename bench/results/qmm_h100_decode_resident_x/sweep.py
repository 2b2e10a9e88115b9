"""Decode schedule sweep of the streaming kernel beyond the tuning candidates.

    python3 sweep.py OUT.jsonl SHAPES DTYPES MS

Per (layer, type, M): every schedule of the grid below that fits, timed with the
write flush (median of >= 50 runs); `us` per schedule, and `close`: whether each
output is within 1e-2 (relative to its largest value) of the first schedule's.
"""

import itertools
import json
import sys

import torch

from tilevm.bench.qmm import SHAPES, Timer
from tilevm.dtypes import parse
from tilevm.kernels.matmul import _launch, _prebuild
from tilevm.kernels.schedule import Schedule, candidates
from tilevm.kernels.weights import quantize


def grid(M: int) -> list[Schedule]:
    found = []
    swaps, warp_counts, splits = ((True,), (2, 4, 8), (1, 2, 4, 8, 16)) if M <= 8 else \
        ((True, False), (2, 4), (1, 2, 4, 8))
    for swap, bk, warps, split, (prefetch, unroll) in itertools.product(
            swaps, (32, 64), warp_counts, splits, ((1, 1), (1, 2), (3, 2))):
        bm = (8 if M <= 8 else 16) if swap else 16
        found.append(Schedule(bm, bk, warps, split, prefetch=prefetch, unroll=unroll,
                              swap_ab=swap))
    return found


def time_grid(timer: Timer, qw, x, N: int, K: int, schedules=None) -> tuple[dict, dict]:
    """(us, close) per schedule of `schedules` (default: `grid(M)`) that fits: its median
    time, and whether its output is within 1e-2 (of the largest value) of the first
    schedule's."""
    M = x.shape[0]
    us, close, first = {}, {}, None
    for s in (s for s in (grid(M) if schedules is None else schedules) if s.fits(K, 128)):
        y = torch.empty(M, N, device="cuda", dtype=torch.float16)
        _launch(x, qw, y, s)
        torch.cuda.synchronize()
        first = y.clone() if first is None else first
        scale = float(first.abs().max())
        close[str(s)] = float((y - first).abs().max()) <= 1e-2 * scale
        run = lambda s=s, y=y: _launch(x, qw, y, s)  # noqa: E731
        us[str(s)] = round(timer(run)[0] * 1e6, 2)
    return us, close


def cells(shapes: str, dtypes: str, ms: str):
    """(shape, N, K, type name, quantized weights, M, x) for each cell of the comma lists:
    the same random weights per layer (seed 0) quantized to each type, f16 x per M."""
    for shape in shapes.split(","):
        N, K = SHAPES[shape]
        torch.manual_seed(0)
        w = torch.randn(K, N, device="cuda", dtype=torch.float16)
        for name in dtypes.split(","):
            qw = quantize(w, parse(name), 128, format="fragments")
            for M in map(int, ms.split(",")):
                yield shape, N, K, name, qw, M, torch.randn(M, K, device="cuda",
                                                            dtype=torch.float16)


def hopper_candidates(M: int, N: int, K: int, bits: int) -> list[Schedule]:
    """The tuner's candidates on an H100 (group 128)."""
    return candidates(M, N, K, 128, hopper=True, bits=bits)


def against_tuned(argv: list[str], grid, kind: str, base=hopper_candidates) -> None:
    """`OUT.jsonl SHAPES DTYPES MS`: per cell, the schedules `base(M, N, K, bits)` ("tuned",
    by default the tuner's) and then `grid(M, bits)` (`kind`) timed with `time_grid`; a row
    per cell with each kind's best and the ratio of their times (sessions 34-36)."""
    out, shapes, dtypes, ms = argv[:4]
    timer = Timer(min_reps=50)
    with open(out, "a") as f:
        for shape, N, K, name, qw, M, x in cells(shapes, dtypes, ms):
            bits = parse(name).bits
            tuned = base(M, N, K, bits)
            tried = [s for s in grid(M, bits) if s.fits(K, 128) and s not in tuned]
            _prebuild(qw, tuned + tried, N)  # (compiled at once, as the tuner does)
            us, close = time_grid(timer, qw, x, N, K, tuned + tried)
            kinds = {"tuned": [str(s) for s in tuned], kind: [str(s) for s in tried]}
            best = {k: min((s for s in v if s in us), key=us.get) for k, v in kinds.items()}
            row = {"shape": shape, "dtype": name, "M": M, "best": best,
                   "best_us": {k: us[s] for k, s in best.items()},
                   "ratio": round(us[best[kind]] / us[best["tuned"]], 3),
                   "us": us, "close": close}
            print(json.dumps({k: row[k] for k in ("shape", "dtype", "M", "best", "best_us",
                                                  "ratio")}),
                  "all close" if all(close.values()) else
                  f"MISMATCH {[s for s, c in close.items() if not c]}", flush=True)
            f.write(json.dumps(row) + "\n")


def main() -> None:
    out, shapes, dtypes, ms = sys.argv[1:5]
    timer = Timer(min_reps=50)
    with open(out, "a") as f:
        for shape, N, K, name, qw, M, x in cells(shapes, dtypes, ms):
            us, close = time_grid(timer, qw, x, N, K)
            best = sorted(us, key=us.get)[:3]
            row = {"shape": shape, "dtype": name, "M": M, "best": best,
                   "best_us": [us[b] for b in best], "us": us, "close": close}
            print(json.dumps({k: row[k] for k in ("shape", "dtype", "M", "best", "best_us")}),
                  "all close" if all(close.values()) else "MISMATCH", flush=True)
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
