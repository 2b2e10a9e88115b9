"""Decode upper bounds (apply experiment.patch first; timing only, the variants compute
wrong values): every tuning candidate of each cell, built as each kind of FAMILY.

    python3 kinds_ab.py OUT.jsonl SHAPES DTYPES MS FAMILY

FAMILY `nosync`: base, the trailing barrier of each k-tile dropped (`exp_sync=1`, a
race), and that with the raw conversion (`TILEVM_EXP_RAW=1`: integer codes as f16
subnormal patterns, no float op). FAMILY `kmajor`: base, the codes read with k-major
atom strides (`exp_kmajor=1`: the same bytes, another order), and that with the raw
conversion. Per kind, the best candidate's median time (write flush, >= 50 runs).
"""
import json
import os
import sys
from dataclasses import replace

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "qmm_h100_decode_resident_x"))
from sweep import cells  # noqa: E402  (session 27's cells)

from tilevm.backend import launch  # noqa: E402
from tilevm.bench.ab import build_renamed_with_env  # noqa: E402
from tilevm.bench.qmm import Timer  # noqa: E402
from tilevm.kernels.matmul import _splitk_buffers  # noqa: E402
from tilevm.kernels.qmm import qmm_kernel  # noqa: E402
from tilevm.kernels.schedule import candidates  # noqa: E402

build_renamed_with_env("_raw", "TILEVM_EXP_RAW")  # the raw variants' suffix


def runner(x, qw, s, raw, flags):
    """A launch of schedule `s` with the patch's `flags`, built raw (`raw`) or not."""
    M, K = x.shape
    N = qw.shape[1]
    program = qmm_kernel("f16").specialize(wdtype=qw.dtype, group_size=128, has_zeros=False,
                                           **flags, **s.constants())
    if raw:
        program = replace(program, name=program.name + "_raw")
    kern = launch.compiled_kernel(program)
    ws, counters = _splitk_buffers(x.device, M, N, s)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    return lambda: kern(x, qw.packed, qw.scales, qw.scales, y, ws, counters, M, N, K)


def main():
    out, shapes, dts, ms, family = sys.argv[1:6]
    timer = Timer(min_reps=50)
    FAMILIES = {"nosync": ("exp_sync", "nosync"), "kmajor": ("exp_kmajor", "kmajor")}
    flag, label = FAMILIES[family]
    KINDS = {"base": (0, {}), label: (0, {flag: 1}), f"raw+{label}": (1, {flag: 1})}
    with open(out, "a") as f:
        for shape, N, K, name, qw, M, x in cells(shapes, dts, ms):
            cands = [s for s in candidates(M, N, K, 128, hopper=True) if s.fits(K, 128)]
            us = {}
            for s in cands:
                for kind, (raw, flags) in KINDS.items():
                    us[f"{kind} {s}"] = timer(runner(x, qw, s, raw, flags))[0] * 1e6
            best = {kind: min(v for k, v in us.items() if k.split()[0] == kind)
                    for kind in KINDS}
            row = {"shape": shape, "dtype": name, "M": M,
                   "best": {k: round(v, 2) for k, v in best.items()},
                   "ratio": {k: round(v / best["base"], 3) for k, v in best.items()},
                   "us": {k: round(v, 2) for k, v in us.items()}}
            print(json.dumps({k: row[k] for k in ("shape", "dtype", "M", "best", "ratio")}),
                  flush=True)
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
