"""Same-process A/B timing of prefill kernel variants, for experiments (the archived
scripts under bench/results/ call it).

`checked_ab` serves the scripts that time prefill programs against a base: it first
compares each variant bitwise with the first ("base") on four ragged shapes (a variant
that differs is reported and not timed), then times every variant and cuBLAS f16 round
by round. `shared_weights_ab` is it for variants of the shared-weights kernel
(`kernels.qmm_wgmma_shared`) against its tuned tiling.

`time_variants` takes the variants as a function of the weight type (label -> a
specialized program of a prefill kernel: `kernels.qmm_wgmma` or
`kernels.qmm_wgmma_shared`, whose parameters are `x, w, scales, zeros, y, M, N, K`).
For each layer and weight type it quantizes the same random weights, compiles every
variant, runs each once and records the sum of its output (equal sums: the variants
compute the same bits), then times each with the L2 read flush (`qmm.Timer`, median of
`min_reps` runs). One JSON row per (layer, type) is appended to a file: the `tag`'s
fields (e.g. a compiler setting the process ran with), `shape`, `dtype`, `us` and
`sums` per variant. Run a script two or more times, in separate processes: the best
round of each variant is what `summarize` compares.

`profile_once` is the profiling scripts' harness: each launch warmed up, then once more
between cudaProfilerStart and Stop, what `ncu --profile-from-start off` profiles.

`build_renamed_with_env` lets one process time a program against itself built under a
compiler setting read from the environment (an experiment's switch): the variant is
the program renamed (the name is part of the cache key), and its build runs with the
variable set.

    python -m tilevm.bench.ab FILE.jsonl [BASE]

prints, per layer and type, each variant's best time over the baseline's (BASE, a
variant's label, with the tag as `key=value,...:label` when rows carry one; default:
the first variant of the first row) with its spread across rounds (max / min), and the
geomean per type.
"""

from __future__ import annotations

import collections
import json
import math
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tilevm.bench.qmm import SHAPES, Timer
from tilevm.dtypes import DataType, parse

Row = dict[str, Any]
_FIELDS = ("shape", "dtype", "us", "sums")


def time_variants(variants: Callable[[DataType], dict[str, Any]], out: str | Path,
                  shapes: Iterable[str], dtypes: Iterable[str], *, M: int = 4096,
                  group_size: int = 128, tag: dict[str, Any] | None = None,
                  min_reps: int = 30, cublas: bool = False) -> list[Row]:
    """Time `variants(wdtype)` on each layer of `shapes` (names of `qmm.SHAPES`) for each
    of `dtypes` at M rows of f16 activations (with `cublas`, `us["cublas"]`: an f16
    matmul of the same shape); append the rows to `out` and return them."""
    import torch

    from tilevm.backend.launch import compiled_kernel
    from tilevm.kernels.weights import quantize

    timer = Timer(min_reps=min_reps, l2_flush="read")
    rows = []
    with open(out, "a") as f:
        for shape in shapes:
            N, K = SHAPES[shape]
            torch.manual_seed(0)
            w = torch.randn(K, N, device="cuda", dtype=torch.float16)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            y = torch.empty(M, N, device="cuda", dtype=torch.float16)
            for name in dtypes:
                wdtype = parse(name)
                qw = quantize(w, wdtype, group_size, format="fragments")
                args = (x, qw.packed, qw.scales, qw.scales, y, M, N, K)
                us, sums = {}, {}
                for label, program in variants(wdtype).items():
                    kernel = compiled_kernel(program)
                    y.zero_()
                    kernel(*args)
                    torch.cuda.synchronize()
                    sums[label] = float(y.double().sum())
                    us[label] = round(timer(lambda k=kernel, a=args: k(*a))[0] * 1e6, 1)
                if cublas:
                    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
                    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
                    us["cublas"] = round(timer(lambda a=a, b=b: a @ b)[0] * 1e6, 1)
                row = {**(tag or {}), "shape": shape, "dtype": name, "us": us, "sums": sums}
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")
                rows.append(row)
    return rows


RAGGED = ((4000, 4000, 1152), (300, 200, 384), (2000, 6016, 4224), (256, 1000, 128))


def shared_weights_ab(tuned: dict[str, Any], variants: dict[str, dict[str, Any]], out: str,
                      shapes: Iterable[str], dtypes: Iterable[str], rounds: int, *,
                      before: Callable[[dict[str, Any]], None] | None = None) -> None:
    """The shared-weights kernel with constants `tuned | kw` for each `variants` label
    (`before(kw)` runs before each is specialized: e.g. to set what a patch reads),
    through `checked_ab`."""
    from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel

    programs: dict[str, dict[str, Any]] = {}
    for name in dtypes:
        found = programs[name] = {}
        for label, kw in variants.items():
            if before is not None:
                before(kw)
            found[label] = qmm_wgmma_shared_kernel("f16").specialize(wdtype=parse(name),
                                                                     **tuned, **kw)
    checked_ab(programs, out, shapes, rounds)


def checked_ab(programs: dict[str, dict[str, Any]], out: str, shapes: Iterable[str],
               rounds: int) -> None:
    """A/B of prefill programs (weight type name -> label -> specialized program, the
    first label the base): each program's registers and local bytes printed; each
    variant compared bitwise with the base on `RAGGED` (its error against float64
    printed beside the base's; a variant that differs is reported and not timed), then
    `time_variants` `rounds` times (M = 4096, >= 50 runs, beside cuBLAS; rows tagged
    with their `round`)."""
    import torch

    from tilevm.backend.launch import compiled_kernel
    from tilevm.kernels.weights import quantize

    def run(kern, x, qw, M, N, K):
        y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        kern(x, qw.packed, qw.scales, qw.scales, y, M, N, K)
        torch.cuda.synchronize()
        return y

    def error(y, ref):
        return float((y.double() - ref).abs().max() / ref.abs().max())

    for name, found in programs.items():
        for label, program in found.items():
            kern = compiled_kernel(program)
            print(name, label, "registers", kern.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"),
                  "local", kern.attribute("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"), flush=True)
        base_label = next(iter(found))
        for M, N, K in RAGGED:
            torch.manual_seed(1)
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            qw = quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), parse(name),
                          128, format="fragments")
            ref = x.double() @ qw.dequantize().double()
            base = run(compiled_kernel(found[base_label]), x, qw, M, N, K)
            for label in [v for v in found if v != base_label]:
                y = run(compiled_kernel(found[label]), x, qw, M, N, K)
                same = bool(torch.equal(y, base))
                print(f"check {name} {M}x{N}x{K} {label}: "
                      f"{'bitwise equal' if same else 'DIFFERS'} (rel err "
                      f"{error(y, ref):.2e}, base {error(base, ref):.2e})", flush=True)
                if not same:
                    del found[label]
    for rnd in range(rounds):
        time_variants(lambda wdtype: programs[wdtype.name], out, shapes, list(programs),
                      tag={"round": rnd}, min_reps=50, cublas=True)


def variant_key(row: Row, label: str) -> str:
    """A variant's name across rows: its label, after the row's tag (`key=value,...:`)."""
    tag = ",".join(f"{k}={v}" for k, v in row.items() if k not in _FIELDS)
    return f"{tag}:{label}" if tag else label


def summarize(rows: list[Row], base: str | None = None) -> list[str]:
    """The lines `python -m tilevm.bench.ab` prints (see the module docstring). Raises
    ValueError where a row's variants disagree on their output."""
    times: dict[tuple[str, str, str], list[float]] = collections.defaultdict(list)
    for row in rows:
        if len(set(row["sums"].values())) > 1:
            raise ValueError(f"variants disagree on {row['shape']} {row['dtype']}: "
                             f"{row['sums']}")
        for label, us in row["us"].items():
            times[(row["shape"], row["dtype"], variant_key(row, label))].append(us)
    if base is None:
        base = variant_key(rows[0], next(iter(rows[0]["us"])))
    keys = list(dict.fromkeys(k for *_, k in times))
    lines = []
    for dtype in dict.fromkeys(r["dtype"] for r in rows):
        ratios = collections.defaultdict(list)
        for shape in dict.fromkeys(r["shape"] for r in rows if r["dtype"] == dtype):
            ref = min(times[(shape, dtype, base)])
            cells = []
            for key in keys:
                t = times.get((shape, dtype, key))
                if t:
                    ratios[key].append(min(t) / ref)
                    cells.append(f"{key} {min(t) / ref:.3f} ({max(t) / min(t):.2f})")
            lines.append(f"{shape} {dtype} {ref} us: " + ", ".join(cells))
        lines.append(f"{dtype} geomean: " + ", ".join(
            f"{k} {math.exp(sum(map(math.log, v)) / len(v)):.3f}" for k, v in ratios.items()))
    return lines


def profile_once(runs: Iterable[Callable[[], Any]], warmups: int = 2) -> None:
    """Run each launch `warmups` times (compiled, caches warm), then each once between
    cudaProfilerStart and Stop: one profiled launch a run under `ncu
    --profile-from-start off`."""
    import torch

    runs = list(runs)
    for run in runs:
        for _ in range(warmups):
            run()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for run in runs:
        run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def build_renamed_with_env(suffix: str, variable: str, value: str = "1") -> None:
    """From now on, build a program whose name ends in `suffix` with the environment
    variable `variable` set to `value` (and restored after): wraps
    `backend.launch.build_artifact`. Rename a program for it with
    `dataclasses.replace(program, name=program.name + suffix)`."""
    from tilevm.backend import launch

    build = launch.build_artifact

    def build_with_env(program, arch):
        if not program.name.endswith(suffix):
            return build(program, arch)
        before = os.environ.get(variable)
        os.environ[variable] = value
        try:
            return build(program, arch)
        finally:
            if before is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = before

    launch.build_artifact = build_with_env


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2:
        raise SystemExit("usage: python -m tilevm.bench.ab FILE.jsonl [BASE]")
    rows = [json.loads(line) for line in open(args[0]) if line.strip()]
    print("\n".join(summarize(rows, args[1] if len(args) > 1 else None)))


if __name__ == "__main__":
    main()
