"""Decode with a register cap (PTX `.maxnreg`) on the tuner's best schedules.

    python3 maxreg_ab.py OUT.jsonl SHAPES DTYPES MS

Per (layer, type, M), f16, group 128, write flush (median of >= 50 runs): the tuner's
candidates (`schedule.candidates`), then its two fastest with `.maxnreg` of each of
`CAPS` written into their PTX (fewer registers a thread, more warps an SM; ptxas spills
what does not fit), then the best uncapped and the best capped schedule in three
alternating rounds (`final_us`: the best round of each). Every output is compared with
the first candidate's (`close`: within 1e-2 of its largest value).
"""

import json
import os
import re
import sys
from dataclasses import replace

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "qmm_h100_decode_resident_x"))
from sweep import cells  # noqa: E402  (session 27's cells)

from tilevm.backend import launch  # noqa: E402
from tilevm.bench.qmm import Timer  # noqa: E402
from tilevm.kernels.matmul import _splitk_buffers  # noqa: E402
from tilevm.kernels.qmm import qmm_kernel  # noqa: E402
from tilevm.kernels.schedule import candidates  # noqa: E402

CAPS = (56, 64, 72, 80, 96, 112)
_build = launch.build_artifact


def build_capped(program, arch):
    """The artifact, with `.maxnreg N` in its PTX when the program's name ends in
    `_maxregN` (the name is part of the cache key, so capped and uncapped forms of one
    program are cached apart)."""
    artifact = _build(program, arch)
    cap = re.search(r"_maxreg(\d+)$", program.name)
    if cap:
        ptx = artifact.ptx.replace(".maxntid", f".maxnreg {cap[1]}\n.maxntid", 1)
        artifact = replace(artifact, ptx=ptx)
    return artifact


launch.build_artifact = build_capped


def runner(x, qw, s, cap: int):
    M, K = x.shape
    N = qw.shape[1]
    program = qmm_kernel("f16").specialize(wdtype=qw.dtype, group_size=128,
                                           has_zeros=False, **s.constants())
    if cap:
        program = replace(program, name=f"{program.name}_maxreg{cap}")
    kern = launch.compiled_kernel(program)
    ws, counters = _splitk_buffers(x.device, M, N, s)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    return y, lambda: kern(x, qw.packed, qw.scales, qw.scales, y, ws, counters, M, N, K)


class Cell:
    """The timings of one (layer, type, M): `us`, `close` and the runs, by label."""

    def __init__(self, timer: Timer, x, qw) -> None:
        self.timer, self.x, self.qw = timer, x, qw
        self.us, self.close, self.runs, self.first = {}, {}, {}, None

    def measure(self, s, cap: int) -> None:
        y, run = runner(self.x, self.qw, s, cap)
        run()
        torch.cuda.synchronize()
        if self.first is None:
            self.first = y.clone()
        label = f"{s}{f' maxnreg={cap}' if cap else ''}"
        self.close[label] = float((y - self.first).abs().max()) <= \
            1e-2 * float(self.first.abs().max())
        self.us[label] = round(self.timer(run)[0] * 1e6, 2)
        self.runs[label] = run


def main() -> None:
    out, shapes, dtypes, ms = sys.argv[1:5]
    timer = Timer(min_reps=50)
    with open(out, "a") as f:
        for shape, N, K, name, qw, M, x in cells(shapes, dtypes, ms):
            tuned = [s for s in candidates(M, N, K, 128, hopper=True) if s.fits(K, 128)]
            cell = Cell(timer, x, qw)
            for s in tuned:
                cell.measure(s, 0)
            us = cell.us
            by_label = {str(s): s for s in tuned}
            for label in sorted(us, key=us.get)[:2]:
                for cap in CAPS:
                    cell.measure(by_label[label], cap)
            best_base = min((k for k in us if "maxnreg" not in k), key=us.get)
            best_capped = min((k for k in us if "maxnreg" in k), key=us.get)
            final = {best_base: [], best_capped: []}
            for _ in range(3):
                for label in final:
                    final[label].append(timer(cell.runs[label])[0] * 1e6)
            final_us = {k: round(min(v), 2) for k, v in final.items()}
            row = {"shape": shape, "dtype": name, "M": M, "best_base": best_base,
                   "best_capped": best_capped, "final_us": final_us,
                   "ratio": round(final_us[best_capped] / final_us[best_base], 3),
                   "us": us, "close": cell.close}
            print(json.dumps({k: row[k] for k in ("shape", "dtype", "M", "best_base",
                                                  "best_capped", "final_us", "ratio")}),
                  "all close" if all(cell.close.values()) else "MISMATCH", flush=True)
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
