"""Quantized matmul benchmark: `python -m tilevm.bench.qmm OUT_DIR [options]` (or
`vmc bench qmm OUT_DIR [options]`).

Times `y[M, N] = x[M, K] @ dequant(W)[K, N]` for every weight type of the benchmark
protocol (BENCHMARKS.md of the project's shared notes) on Llama-3 layer shapes, against
cuBLAS fp16/bf16 (`torch.matmul`) and, where it imports, the Triton low-bit matmul
`gemlite`. Per the protocol:

- each kernel's output buffer is poisoned with NaN, the kernel is run on fresh random
  inputs and checked against a float64 reference `x @ dequantize(W)` computed on the GPU;
  a failed check is reported and not timed;
- timing is the median of >= 100 CUDA-event-timed runs, each behind a GPU sleep and a
  256 MB L2 flush (no weight is served from L2), every kernel of a run alike: the sleep
  outlasts the host's submission, so a launch's host time (tilevm's Python launch path
  checks its arguments) is not counted (see `Timer`; `triton.testing.do_bench` only
  where torch has no GPU sleep). Each row records its method and the host time per
  launch. `--l2-flush read` reads the flush buffer instead of writing
  it (every run timed with events): the write flush leaves L2 dirty, and a kernel that
  reads B bytes then also waits for up to min(B, L2 size) bytes of write-back;
- the two ceilings are measured in the same run: device-to-device copy bandwidth
  (bytes read + written per second) and cuBLAS fp16 TFLOP/s at 8192^3. Each result is
  reported as us, TB/s, TFLOP/s, speedup over cuBLAS on the same shape and activation
  type, and fraction of its roofline `t_roof = max(bytes / copy_bw, flops / peak)`
  with `bytes = N*K*b/8 + (N*K/g)*scale_bytes + 2*M*K + 2*M*N`, `flops = 2*M*N*K`;
- compile time of each tilevm variant is reported cold (fresh kernel cache) and cached
  (a fresh specialization served from the on-disk cache), separately from the timings;
- with `--read-floor`, each memory-bound cell also gets the read floor of its bytes
  (`bench.read_floor`: a kernel that only reads that many bytes, timed the same way):
  `floor_fraction = t_floor / t` (how close the kernel is to reading its bytes and
  nothing else) and `attainable_roofline = t_roof / t_floor` (the roofline fraction of
  that read-only kernel: what the timer and flush leave reachable).

The tilevm kernel is reached through one adapter, `tilevm_matmul_factory`: it uses
`tilevm.kernels.quantize`/`quantized_matmul` where that package provides them, else the
example kernel examples/quantized_matmul.py through `tv.compile`.

Writes OUT_DIR/qmm.json (everything), OUT_DIR/qmm.md (tables) and OUT_DIR/qmm.png (roofline
fraction against M, one line per weight type; skipped, and said so in the JSON, without
matplotlib) and prints a short table last. Without torch or a CUDA device it writes a
JSON that says why it was skipped and exits 0.

    python -m tilevm.bench.qmm out --quick            # smoke test, about a minute
    python -m tilevm.bench.qmm out                    # Llama-3-8B shapes, f16, ~8 minutes
    python -m tilevm.bench.qmm out --full             # everything (70B, bf16): long
    python -m tilevm.bench.qmm out --shapes 8b.qkv --m 1,16 --dtypes int4,int3 --act f16,bf16

gemlite: `bench/wheels/` holds its pure-Python wheel (the GPU machine has no network);
`--install-wheels` installs it with `pip install --no-deps --no-index` before the run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tilevm import dtypes
from tilevm.bench.examples import load_example

ROOT = Path(__file__).resolve().parent.parent
WHEELS = Path(__file__).resolve().parent / "wheels"

# ---- the protocol's matrix ---------------------------------------------------------------

# (N, K) of the Llama-3 linear layers: y[M, N] = x[M, K] @ W[K, N].
SHAPES: dict[str, tuple[int, int]] = {
    "8b.qkv": (12288, 4096), "8b.o": (4096, 4096),
    "8b.gate_up": (28672, 4096), "8b.down": (4096, 14336),
    "70b.qkv": (10240, 8192), "70b.o": (8192, 8192),
    "70b.gate_up": (57344, 8192), "70b.down": (8192, 28672),
    # The ragged-N case: a multiple of 8 (whole bytes per packed row, as the weight
    # format needs) but of no usual tile width (64, 128, 256).
    "ragged_n": (4104, 4096),
}
SHAPE_GROUPS = {"8b": [s for s in SHAPES if s.startswith("8b.")],
                "70b": [s for s in SHAPES if s.startswith("70b.")],
                "all": list(SHAPES)}
M_VALUES = [1, 16, 64, 256, 4096]
RAGGED_M = 17
WEIGHT_TYPES = ["int4", "uint4", "int2", "int3", "int5", "int6", "int8", "uint2", "uint3",
                "f3e1m1", "f4e2m1", "f5e2m2", "f6e3m2", "f6e2m3", "f8e4m3", "f8e5m2"]
ACTS = ["f16", "bf16"]
BACKENDS = ["tilevm", "cublas", "gemlite"]
L2_FLUSHES = ["write", "read"]
GROUP_SIZE = 128
SCALE_BYTES = 2  # one f16 (or bf16) scale per group and column

# Presets. The default fits in about 8 minutes on an H100 (and --budget-s enforces it);
# --quick is the smoke test: the literature's three comparison types on the 8B qkv layer.
# gemlite's first call of each shape and M compiles Triton kernels (~8 s each on an H100),
# so the default and quick runs time it on int4 only.
DEFAULT = {"shapes": SHAPE_GROUPS["8b"] + ["ragged_n"], "m": M_VALUES + [RAGGED_M],
           "dtypes": WEIGHT_TYPES, "act": ["f16"], "budget_s": 480.0,
           "gemlite_dtypes": ["int4"]}
QUICK = {"shapes": ["8b.qkv"], "m": [1, RAGGED_M, 4096], "dtypes": ["int4", "int3", "f6e3m2"],
         "act": ["f16"], "budget_s": 240.0, "gemlite_dtypes": ["int4"]}
FULL = {"shapes": list(SHAPES), "m": M_VALUES + [RAGGED_M], "dtypes": WEIGHT_TYPES,
        "act": ACTS, "budget_s": 0.0, "gemlite_dtypes": WEIGHT_TYPES}

# Check tolerance: max |y - ref| / rms(ref). The kernels round each dequantized weight and
# the output to the activation type (unit roundoff 2^-11 for f16, 2^-9 for bf16; the
# largest outputs are ~5x the rms), so a correct kernel sits well below these and a wrong
# one (a misread bit field, a missing scale) is off by O(1).
TOLERANCE = {"f16": 2.0 ** -7, "bf16": 2.0 ** -4}
# gemlite's M=1 GEMV adds its split-K partial sums into the f16 output with atomics (its
# fma-form zero points add a per-group rounding too): a baseline property, not a bug,
# measured at ~1.2% of rms on the 8B qkv layer. Its checks get 4x the tolerance.
BACKEND_TOLERANCE_FACTOR = {"gemlite": 4.0}


def tolerance(backend: str, act: str) -> float:
    """The check's bound on max |y - ref| / rms(ref) for a backend and activation type."""
    return TOLERANCE[act] * BACKEND_TOLERANCE_FACTOR.get(backend, 1.0)
MIN_REPS = 100
FLUSH_BYTES = 256 << 20
SLEEP_S = 100e-6  # the GPU sleep before every timed run's flush (Timer)


# ---- options ----------------------------------------------------------------------------

@dataclass
class Options:
    """What to run (parsed from the command line by `parse_options`)."""

    out: str
    shapes: list[tuple[str, int, int]]  # (name, N, K)
    m: list[int]
    dtypes: list[str]
    act: list[str]
    backends: list[str]
    group_size: int = GROUP_SIZE
    budget_s: float = 0.0  # 0: no limit
    min_reps: int = MIN_REPS
    seed: int = 0
    install_wheels: bool = False
    preset: str = "default"
    gemlite_dtypes: list[str] = field(default_factory=lambda: ["int4"])
    l2_flush: str = "write"
    read_floor: bool = False


def _split(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_shapes(text: str) -> list[tuple[str, int, int]]:
    """`8b.qkv,70b,ragged_n,1000x512` -> [(name, N, K)]: shape names, groups (8b, 70b,
    all) and custom `NxK`."""
    found: list[tuple[str, int, int]] = []
    for item in _split(text):
        if item in SHAPE_GROUPS:
            names = SHAPE_GROUPS[item]
        elif item in SHAPES:
            names = [item]
        else:
            n, sep, k = item.lower().partition("x")
            if not (sep and n.isdigit() and k.isdigit() and int(n) > 0 and int(k) > 0):
                raise ValueError(f"unknown shape {item!r}: one of {', '.join(SHAPES)}, "
                                 f"{', '.join(SHAPE_GROUPS)} or NxK")
            found.append((f"{int(n)}x{int(k)}", int(n), int(k)))
            continue
        found += [(name, *SHAPES[name]) for name in names]
    if not found:
        raise ValueError("no shapes selected")
    return list(dict.fromkeys(found))  # keep order, drop repeats


def parse_ints(text: str) -> list[int]:
    """`1,16,4096` -> [1, 16, 4096] (positive integers)."""
    values = []
    for item in _split(text):
        if not item.isdigit() or int(item) <= 0:
            raise ValueError(f"M must be a positive integer, got {item!r}")
        values.append(int(item))
    if not values:
        raise ValueError("no M selected")
    return list(dict.fromkeys(values))


def parse_choices(text: str, allowed: Sequence[str], what: str) -> list[str]:
    """A comma list of names from `allowed` ("all" selects every one)."""
    items = _split(text)
    if items == ["all"]:
        return list(allowed)
    bad = [i for i in items if i not in allowed]
    if bad or not items:
        raise ValueError(f"unknown {what} {', '.join(bad) or '(none)'}: "
                         f"choose from {', '.join(allowed)} or all")
    return list(dict.fromkeys(items))


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m tilevm.bench.qmm` (and `vmc bench qmm`)."""
    parser = argparse.ArgumentParser(
        prog="python -m tilevm.bench.qmm",
        description="Quantized matmul benchmark: tilevm against cuBLAS and gemlite on "
                    "Llama-3 shapes; writes qmm.json, qmm.md, qmm.png to OUT_DIR.",
        epilog=f"default: shapes {','.join(DEFAULT['shapes'])}; M "
               f"{','.join(map(str, DEFAULT['m']))}; every weight type; f16; about 8 "
               f"minutes on an H100 (--budget-s {DEFAULT['budget_s']:.0f}). --quick: "
               f"{','.join(QUICK['shapes'])}, M {','.join(map(str, QUICK['m']))}, "
               f"{','.join(QUICK['dtypes'])}. --full: every shape, M, type and activation. "
               f"Shapes: {', '.join(SHAPES)}, groups {', '.join(SHAPE_GROUPS)}, or NxK.")
    parser.add_argument("out", metavar="OUT_DIR", help="folder for qmm.json, qmm.md, qmm.png")
    preset = parser.add_mutually_exclusive_group()
    preset.add_argument("--quick", action="store_true", help="a small smoke-test subset")
    preset.add_argument("--full", action="store_true", help="the whole matrix (long)")
    parser.add_argument("--shapes", help="comma list of shape names, groups or NxK")
    parser.add_argument("--m", help="comma list of batch sizes M")
    parser.add_argument("--dtypes", help=f"comma list of weight types (or all): "
                                         f"{','.join(WEIGHT_TYPES)}")
    parser.add_argument("--act", help="activation types: f16, bf16 (comma list, or all)")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help="comma list of tilevm, cublas, gemlite (default: all)")
    parser.add_argument("--gemlite-dtypes",
                        help="weight types gemlite is timed on (comma list, or all; "
                             "default int4, --full all); it runs the integer 2/4/8-bit ones")
    parser.add_argument("--group-size", type=int, default=GROUP_SIZE,
                        help=f"weights per scale along K (default {GROUP_SIZE})")
    parser.add_argument("--budget-s", type=float,
                        help="stop timing new configurations after this many seconds and "
                             "record the rest as skipped (0: no limit; default 480, "
                             "--quick 240, --full none)")
    parser.add_argument("--min-reps", type=int, default=MIN_REPS,
                        help=f"timed runs per median, at least (default {MIN_REPS})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--l2-flush", choices=L2_FLUSHES, default="write",
                        help="how L2 is emptied before each timed run: write (default) "
                             "zeroes a 256 MB buffer, as triton.testing.do_bench does; read "
                             "sums one, which leaves L2 clean (see Timer)")
    parser.add_argument("--read-floor", action="store_true",
                        help="also time a kernel that only reads each memory-bound cell's "
                             "bytes, and report the fraction of it each kernel reaches "
                             "(see bench/read_floor.py)")
    parser.add_argument("--install-wheels", action="store_true",
                        help="pip install --no-deps --no-index the wheels in bench/wheels "
                             "(gemlite) before the run")
    return parser


def parse_options(argv: Sequence[str] | None = None) -> Options:
    """Parse the command line into `Options` (presets, then explicit selections on top).
    Bad values exit with status 2, as argparse does."""
    parser = build_parser()
    args = parser.parse_args(argv)
    name = "quick" if args.quick else "full" if args.full else "default"
    preset = {"quick": QUICK, "full": FULL, "default": DEFAULT}[name]
    try:
        shapes = parse_shapes(args.shapes) if args.shapes else \
            [(s, *SHAPES[s]) for s in preset["shapes"]]
        ms = parse_ints(args.m) if args.m else list(preset["m"])
        wtypes = parse_choices(args.dtypes, WEIGHT_TYPES, "weight type") if args.dtypes \
            else list(preset["dtypes"])
        acts = parse_choices(args.act, ACTS, "activation type") if args.act \
            else list(preset["act"])
        backends = parse_choices(args.backends, BACKENDS, "backend")
        gemlite_dtypes = parse_choices(args.gemlite_dtypes, WEIGHT_TYPES, "weight type") \
            if args.gemlite_dtypes else list(preset["gemlite_dtypes"])
    except ValueError as err:
        parser.error(str(err))
    if args.group_size <= 0:
        parser.error("--group-size must be positive")
    if args.min_reps <= 0:
        parser.error("--min-reps must be positive")
    budget = preset["budget_s"] if args.budget_s is None else args.budget_s
    return Options(out=args.out, shapes=shapes, m=sorted(ms), dtypes=wtypes, act=acts,
                   backends=backends, group_size=args.group_size, budget_s=max(budget, 0.0),
                   min_reps=args.min_reps, seed=args.seed,
                   install_wheels=args.install_wheels, preset=name,
                   gemlite_dtypes=gemlite_dtypes, l2_flush=args.l2_flush,
                   read_floor=args.read_floor)


# ---- the roofline (pure) ---------------------------------------------------------------------

def traffic_bytes(M: int, N: int, K: int, bits: int, group_size: int | None,
                  scale_bytes: int = SCALE_BYTES) -> float:
    """The protocol's minimum DRAM traffic: packed weights, scales, x read, y written
    (f16/bf16 activations). `group_size` None: no scales (cuBLAS's 16-bit weights)."""
    scales = 0.0 if not group_size else (N * K / group_size) * scale_bytes
    return N * K * bits / 8 + scales + 2 * M * K + 2 * M * N


def matmul_flops(M: int, N: int, K: int) -> float:
    """Multiply-adds counted as two operations: 2*M*N*K."""
    return 2.0 * M * N * K


def roofline_seconds(nbytes: float, flops: float, copy_bw: float, peak_flops: float) -> float:
    """`max(bytes / copy_bw, flops / peak)`: the time at the better of the two ceilings."""
    return max(nbytes / copy_bw, flops / peak_flops)


def metrics(seconds: float, nbytes: float, flops: float, copy_bw: float,
            peak_flops: float) -> dict[str, float]:
    """us, TB/s, TFLOP/s, roofline time and fraction of it for one timed kernel."""
    t_roof = roofline_seconds(nbytes, flops, copy_bw, peak_flops)
    return {"us": seconds * 1e6, "tbps": nbytes / seconds / 1e12,
            "tflops": flops / seconds / 1e12, "t_roof_us": t_roof * 1e6,
            "roofline_fraction": t_roof / seconds,
            "bound": "memory" if nbytes / copy_bw >= flops / peak_flops else "compute"}


# ---- what each backend can run (pure) ------------------------------------------------------

def example_unsupported(wdtype: str, group_size: int, act: str, N: int, K: int) -> str | None:
    """Why examples/quantized_matmul.py cannot run this configuration, or None."""
    if act != "f16":
        return "the example kernel takes f16 activations only"
    if N % 8:
        return f"the example's weight format needs N % 8 == 0 (N={N})"
    if group_size % 32:
        return f"the example needs group_size % bk == 0 (bk=32, group_size={group_size})"
    if K % group_size:
        return f"the example needs K % group_size == 0 (K={K}, group_size={group_size})"
    if not 1 <= dtypes.parse(wdtype).bits <= 8:
        return f"{wdtype} is not a 1..8-bit type"
    return None


GEMLITE_BITS = {"int8": 8, "int4": 4, "uint4": 4, "int2": 2, "uint2": 2}


def gemlite_unsupported(wdtype: str, group_size: int, act: str, N: int, K: int) -> str | None:
    """Why gemlite (integer weights of 1/2/4/8 bits, HQQ format) cannot run this, or None."""
    if wdtype not in GEMLITE_BITS:
        return f"gemlite has no {wdtype} weights (integer 1/2/4/8-bit only)"
    if K % 32 or K % group_size or group_size < 16:
        return f"gemlite needs K % 32 == 0, K % group_size == 0, group_size >= 16 " \
               f"(K={K}, group_size={group_size})"
    return None


# ---- configurations (pure) ------------------------------------------------------------------

@dataclass(frozen=True)
class Config:
    """One timed matmul: a backend on one shape, batch, weight and activation type."""

    backend: str
    shape: str
    N: int
    K: int
    M: int
    wdtype: str  # "f16"/"bf16" for cuBLAS: its weights are the activation type
    act: str
    group_size: int | None

    @property
    def bits(self) -> int:
        return 16 if self.backend == "cublas" else dtypes.parse(self.wdtype).bits


def plan(options: Options) -> list[Config]:
    """Every configuration the options select, in run order: per shape, the cuBLAS
    baselines first (the speedups refer to them), then each weight type's kernels."""
    configs: list[Config] = []
    for name, N, K in options.shapes:
        if "cublas" in options.backends:
            configs += [Config("cublas", name, N, K, M, act, act, None)
                        for act in options.act for M in options.m]
        for wdtype in options.dtypes:
            for act in options.act:
                for M in options.m:
                    configs += [Config(b, name, N, K, M, wdtype, act, options.group_size)
                                for b in ("tilevm", "gemlite") if b in options.backends
                                and (b != "gemlite" or wdtype in options.gemlite_dtypes)]
    return configs


# ---- reports (pure) -------------------------------------------------------------------------

def _fmt(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def _cell(result: dict) -> str:
    """One pivot-table cell: speedup over cuBLAS (same activation) and roofline fraction."""
    status = result.get("status")
    if status == "ok":
        speed = result.get("speedup_vs_cublas")
        speed_text = f"{speed:.2f}x" if speed is not None else "?x"
        return f"{speed_text} {100 * result['roofline_fraction']:.0f}%"
    return {"fail": "FAIL", "error": "ERR"}.get(status, "-")


def format_summary(results: list[dict], ceilings: dict | None = None) -> str:
    """The short table printed last: one row per (backend, shape, weight type,
    activation), one column per M; each cell `speedup over cuBLAS, % of roofline`
    (FAIL: wrong result, ERR: the kernel raised, -: skipped)."""
    ms = sorted({r["M"] for r in results})
    rows: dict[tuple, dict[int, dict]] = {}
    for r in results:
        key = (r["backend"], r["shape"], r["wdtype"], r["act"])
        rows.setdefault(key, {})[r["M"]] = r
    lines = []
    if ceilings:
        lines.append(f"ceilings: copy {ceilings['copy_bw_bytes_per_s'] / 1e12:.2f} TB/s, "
                     f"cuBLAS f16 {ceilings['cublas_f16_tflops']:.0f} TFLOP/s at 8192^3")
    lines.append("cell: speedup over cuBLAS (same shape, activation type), % of roofline")
    head = f"{'backend':<8} {'shape':<12} {'weights':<7} {'act':<4}" + \
        "".join(f" {'M=' + str(m):>12}" for m in ms)
    lines += [head, "-" * len(head)]
    for (backend, shape, wdtype, act), by_m in rows.items():
        cells = "".join(f" {(_cell(by_m[m]) if m in by_m else ''):>12}" for m in ms)
        lines.append(f"{backend:<8} {shape:<12} {wdtype:<7} {act:<4}{cells}")
    counts = {s: sum(r["status"] == s for r in results) for s in ("ok", "fail", "error", "skip")}
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items()))
    return "\n".join(lines)


MD_COLUMNS = [("backend", "backend", "s"), ("shape", "shape", "s"), ("N", "N", "d"),
              ("K", "K", "d"), ("M", "M", "d"), ("weights", "wdtype", "s"),
              ("act", "act", "s"), ("check", "check", "s"), ("max err", "max_err", ".2e"),
              ("us", "us", ".1f"), ("TB/s", "tbps", ".2f"), ("TFLOP/s", "tflops", ".1f"),
              ("x cuBLAS f16", "speedup_vs_cublas_f16", ".2f"),
              ("x cuBLAS bf16", "speedup_vs_cublas_bf16", ".2f"),
              ("roofline", "roofline_fraction", ".1%"),
              ("of read floor", "floor_fraction", ".1%"),
              ("floor's roofline", "attainable_roofline", ".1%"), ("note", "reason", "s")]


def format_markdown(report: dict) -> str:
    """qmm.md: the run's ceilings, the summary table and every result row."""
    out = [f"# Quantized matmul benchmark ({report.get('date', '')})", ""]
    if report.get("status") == "skipped":
        return "\n".join(out + [f"Skipped: {report.get('reason')}", ""])
    env = report.get("environment", {})
    if env:
        out += [f"GPU: {env.get('gpu')}; driver {env.get('driver')}; torch "
                f"{env.get('torch')}; triton {env.get('triton')}; timing: "
                f"{report.get('timing', {}).get('method')}", ""]
    ceilings = report.get("ceilings")
    if ceilings:
        out += [f"Ceilings: device copy {ceilings['copy_bw_bytes_per_s'] / 1e12:.2f} TB/s "
                f"(read + written), cuBLAS f16 8192^3 {ceilings['cublas_f16_tflops']:.0f} "
                f"TFLOP/s.", ""]
    results = report.get("results", [])
    out += ["```", format_summary(results), "```", ""]
    out.append("| " + " | ".join(title for title, _, _ in MD_COLUMNS) + " |")
    out.append("|" + "|".join("---" for _ in MD_COLUMNS) + "|")
    for r in results:
        row = dict(r)
        row["check"] = {True: "pass", False: "FAIL", None: "-"}[r.get("check_passed")]
        row["max_err"] = r.get("max_rel_err")
        cells = []
        for _, key, spec in MD_COLUMNS:
            value = row.get(key)
            text = _fmt(value, spec) if spec != "s" else ("-" if value is None else str(value))
            cells.append(text.replace("|", "\\|"))
        out.append("| " + " | ".join(cells) + " |")
    compile_rows = report.get("compile", [])
    if compile_rows:
        out += ["", "Compile time of each tilevm variant (s):", "",
                "| weights | group | cold | cached | via |", "|---|---|---|---|---|"]
        out += [f"| {c['wdtype']} | {c['group_size']} | {_fmt(c.get('cold_s'), '.3f')} | "
                f"{_fmt(c.get('cached_s'), '.3f')} | {c.get('via', '')} |" for c in compile_rows]
    return "\n".join(out) + "\n"


def jsonable(value: Any) -> Any:
    """`value` with non-finite floats as None (JSON has no NaN) and tuples as lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return jsonable(value.item())
    return value


# ---- the GPU side ---------------------------------------------------------------------------

class Unsupported(Exception):
    """A backend cannot run this configuration (the message says why); recorded as a skip."""


def gpu_unavailable_reason() -> str | None:
    """Why this process cannot run the benchmark (no torch, no CUDA device), or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (the benchmark launches on torch CUDA tensors)"
    try:
        if not torch.cuda.is_available():
            return "no CUDA device (torch.cuda.is_available() is False)"
    except Exception as err:  # a broken driver install
        return f"CUDA is not usable: {type(err).__name__}: {err}"
    return None


def _torch_dtype(act: str):
    import torch

    return {"f16": torch.float16, "bf16": torch.bfloat16}[act]


class Timer:
    """Median kernel time in seconds, L2 flushed before every timed run.

    Every run is timed with CUDA events behind a GPU sleep (`torch.cuda._sleep`, at
    least `SLEEP_S` and twice the host's submission time): the sleep keeps the GPU busy
    until the flush, the events and the launch are queued, so the events bracket the
    kernel alone, however long the host takes to submit it (tilevm's Python launch path
    checks its arguments). `triton.testing.do_bench` serves only where torch has no
    sleep: it records its events around the launch right after its flush, so a launch
    that takes the host longer than the flush counts the GPU's idle wait as the
    kernel's. (Until 2026-11-22 the method was chosen per launch by its host time, and
    one run mixed the two: do_bench measured the same kernels 2-7% slower than the
    events, bench/results/qmm_h100_timer_methods/, so cells of one table were not
    comparable.)

    `l2_flush`: how L2 is emptied. "write" zeroes a 256 MB buffer (do_bench's own flush).
    That leaves L2 full of dirty lines, which the timed kernel's reads then evict and
    the memory writes back during its run: a kernel reading B bytes also pays for up to
    min(B, L2) bytes written (H100, 8B qkv at M = 1: cuBLAS 48 us, 39 us after a read
    flush or with rotating weight copies; tilevm int4 20 vs 17 us). "read" sums the
    buffer instead (every run timed with events), which evicts as well and leaves the
    lines clean: the kernel moves only its own bytes, as in a serving loop whose
    previous kernel read its weights, and as the roofline counts them."""

    def __init__(self, min_reps: int = MIN_REPS, l2_flush: str = "write") -> None:
        import torch

        if l2_flush not in L2_FLUSHES:
            raise ValueError(f"l2_flush must be one of {', '.join(L2_FLUSHES)}, got "
                             f"{l2_flush!r}")
        self.min_reps = min_reps
        self.l2_flush = l2_flush
        flush = f"{FLUSH_BYTES >> 20} MB L2 flush per run ({l2_flush})"
        self._do_bench: Callable | None = None
        self.method = (f"CUDA events behind a GPU sleep of at least {SLEEP_S * 1e6:.0f} us, "
                       f"median, {flush}")
        if l2_flush == "write" and not hasattr(torch.cuda, "_sleep"):
            try:
                from triton.testing import do_bench
                self._do_bench = do_bench
                self.method = "triton.testing.do_bench(return_mode='median'), L2 flushed " \
                              "per run (no GPU sleep in this torch)"
            except Exception:  # no Triton: CUDA events and our own flush
                pass
        # Writing (or reading) this buffer evicts everything else from L2 (50 MB on an
        # H100).
        self._flush_buffer = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def flush(self) -> None:
        """Empty L2 (see the class docstring)."""
        if self.l2_flush == "write":
            self._flush_buffer.zero_()
        else:
            self._flush_buffer.sum()

    @staticmethod
    def _gpu_seconds(fn: Callable[[], Any], n: int) -> float:
        import torch

        fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / n / 1e3

    def _estimate(self, fn: Callable[[], Any]) -> tuple[float, float]:
        """(seconds per flushed run, host seconds to submit one launch), after a warm-up."""
        import torch

        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):  # no sync in between: the host's submission cost alone
            fn()
        host = (time.perf_counter() - t0) / 5
        torch.cuda.synchronize()

        def flushed():
            self.flush()
            fn()

        return self._gpu_seconds(flushed, 3), host

    def __call__(self, fn: Callable[[], Any]) -> tuple[float, int, str]:
        """(median seconds, number of timed runs, method: "do_bench" or "events")."""
        est, host = self._estimate(fn)
        est = max(est, 1e-6)
        if self._do_bench is not None:  # (torch has no GPU sleep)
            # do_bench runs rep / (its own estimate of one flushed run) times: ask for
            # enough milliseconds that this is at least min_reps (+10% margin).
            rep_ms = max(100.0, 1.1 * self.min_reps * est * 1e3)
            ms = self._do_bench(fn, warmup=25, rep=rep_ms, return_mode="median")
            return ms / 1e3, max(self.min_reps, int(rep_ms / (est * 1e3))), "do_bench"
        return (*self._events(fn, est, host), "events")

    def _events(self, fn: Callable[[], Any], est: float, host: float) -> tuple[float, int]:
        import torch

        reps = max(self.min_reps, min(1000, int(0.1 / est)))
        for _ in range(max(3, min(100, int(0.025 / est)))):  # warm-up: clocks, driver
            fn()
        # Sleep twice the host's submission time, and at least SLEEP_S, so that every
        # kernel a table compares starts after the same idle time (at ~2 GHz; a slower
        # clock sleeps longer).
        cycles = int(max(2 * host, SLEEP_S) * 2e9)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        sleep = getattr(torch.cuda, "_sleep", lambda cycles: None)
        for s, e in zip(starts, ends):
            sleep(cycles)
            self.flush()
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) / 1e3, reps


def _copy_seconds(timer: Timer, n: int) -> float:
    """Median time of a device-to-device copy of `n` bytes (its buffers freed on return)."""
    import torch

    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return timer(lambda: dst.copy_(src))[0]


def measure_ceilings(timer: Timer) -> dict[str, Any]:
    """Device copy bandwidth (1 GiB copied: bytes read + written per second) and cuBLAS
    TFLOP/s of an 8192^3 matmul, f16 (the roofline's peak) and bf16, on random data."""
    import torch

    n = 1 << 30
    t_copy = _copy_seconds(timer, n)
    out: dict[str, Any] = {"copy_bytes": n, "copy_s": t_copy,
                           "copy_bw_bytes_per_s": 2 * n / t_copy}
    s = 8192
    for act in ACTS:
        a = torch.randn(s, s, dtype=_torch_dtype(act), device="cuda")
        b = torch.randn(s, s, dtype=_torch_dtype(act), device="cuda")
        t = timer(lambda a=a, b=b: torch.matmul(a, b))[0]
        out[f"cublas_{act}_s"] = t
        out[f"cublas_{act}_tflops"] = matmul_flops(s, s, s) / t / 1e12
        del a, b
    torch.cuda.empty_cache()
    return out


# ---- weights: random codes and scales on the GPU, the example's format -------------------

CHUNK_ELEMENTS = 1 << 26


def _row_chunks(rows: int, cols: int) -> Iterable[slice]:
    """Row blocks of about CHUNK_ELEMENTS elements: the int64 temporaries of the
    generators stay small (a 70B gate_up layer has 470M weights)."""
    step = max(1, CHUNK_ELEMENTS // max(cols, 1))
    for r0 in range(0, rows, step):
        yield slice(r0, min(rows, r0 + step))


def pack_rows(codes, bits: int):
    """torch uint8 `codes[K, N]` (N % 8 == 0) -> `[K, N*bits/8]` bytes, row k packed along N
    exactly as the example's `pack_weights` (`tilevm.dtypes.pack`) does: element n at bits
    [n*b, (n+1)*b) of the row, little-endian. `kernels.weights.pack_weights` on the
    tensor's device, a block of rows at a time (its temporaries stay small for a
    470M-weight layer)."""
    import torch

    from tilevm.kernels.weights import pack_weights

    K, N = codes.shape
    if N % 8:
        raise ValueError(f"N must be a multiple of 8, got {N}")
    out = torch.empty((K, N * bits // 8), dtype=torch.uint8, device=codes.device)
    for rows in _row_chunks(K, N):
        out[rows] = pack_weights(codes[rows], f"uint{bits}")  # packing sees only the bits
    return out


@dataclass
class Weights:
    """One random quantized weight matrix on the GPU, shared by every backend."""

    wdtype: str
    group_size: int
    codes: Any  # uint8 [K, N], codes of finite values only
    scales: Any  # f16 [K / g, N], positive
    dequantized: Any  # float64 [K, N]: decode(codes) * scales, the reference's weights

    @property
    def K(self) -> int:
        return int(self.codes.shape[0])

    @property
    def N(self) -> int:
        return int(self.codes.shape[1])


def decode_table(wdtype: str) -> np.ndarray:
    """float64 value of every code of `wdtype` (NaN/inf at special codes)."""
    t = dtypes.parse(wdtype)
    return dtypes.decode(np.arange(1 << t.bits), t).astype(np.float64)


def make_weights(wdtype: str, group_size: int, N: int, K: int, generator,
                 device: str = "cuda") -> Weights:
    """Uniformly random finite codes (as the example's `random_codes`) and random
    positive f16 scales in [0.5, 2) / largest |value| (as its `example_inputs`), made on
    `device` (the generator's)."""
    import torch

    if K % group_size:
        raise Unsupported(f"K ({K}) is not a multiple of group_size ({group_size})")
    t = dtypes.parse(wdtype)
    table = decode_table(wdtype)
    finite = torch.as_tensor(np.flatnonzero(np.isfinite(table)), dtype=torch.uint8,
                             device=device)
    lut = torch.as_tensor(table, device=device)
    codes = torch.empty((K, N), dtype=torch.uint8, device=device)
    for rows in _row_chunks(K, N):
        n = rows.stop - rows.start
        idx = torch.randint(0, len(finite), (n, N), device=device, generator=generator)
        codes[rows] = finite[idx]
    largest = max(abs(float(t.min)), float(t.max))
    scales = ((torch.rand((K // group_size, N), device=device, generator=generator) * 1.5
               + 0.5) / largest).to(torch.float16).clamp_min(2.0 ** -24)
    dequant = torch.empty((K, N), dtype=torch.float64, device=device)
    for rows in _row_chunks(K, N):
        # The scale rows of the groups this block touches, one per weight row.
        g0, g1 = rows.start // group_size, (rows.stop - 1) // group_size + 1
        per_row = scales[g0:g1].double().repeat_interleave(group_size, 0)
        offset = rows.start - g0 * group_size
        dequant[rows] = lut[codes[rows].long()] * per_row[offset:offset + rows.stop - rows.start]
    return Weights(wdtype, group_size, codes, scales, dequant)


# ---- the tilevm adapter ---------------------------------------------------------------------

@dataclass
class Prepared:
    """A matmul ready to launch: `fn(x) -> y` on the current stream."""

    fn: Callable[[Any], Any]
    weight_bytes: int  # bytes of the packed weights and scales the kernel reads
    out: Any = None  # the buffer fn writes (poisoned before the check); None: fn allocates
    dequantized: Any = None  # float64 [K, N] the kernel implements, if not the Weights'
    compile: dict[str, Any] = field(default_factory=dict)
    note: str = ""


_EXAMPLE_MODULE: Any = None
_VARIANTS: dict[tuple[str, int], tuple[Any, dict]] = {}  # (wdtype, g) -> (kernel, times)


def _load_example(fresh: bool = False):
    """examples/quantized_matmul.py (bench may not import examples); a fresh copy has a
    fresh kernel object, with no cached specialization."""
    global _EXAMPLE_MODULE
    if _EXAMPLE_MODULE is not None and not fresh:
        return _EXAMPLE_MODULE
    module = load_example("quantized_matmul")
    if not fresh:
        _EXAMPLE_MODULE = module
    return module


def _example_variant(wdtype: str, group_size: int) -> tuple[Any, dict]:
    """The compiled example kernel for (wdtype, group_size) and its compile times: cold
    (the run's kernel cache starts empty) and cached (a fresh specialization, served from
    the on-disk cache, as a new process would see it)."""
    key = (wdtype, group_size)
    if key in _VARIANTS:
        return _VARIANTS[key]
    import tilevm as tv

    constants = {"wdtype": dtypes.parse(wdtype), "group_size": group_size}
    t0 = time.perf_counter()
    kernel = tv.compile(_load_example().quantized_matmul, **constants)
    cold = time.perf_counter() - t0
    cached = None
    with contextlib.suppress(ImportError, AttributeError):
        from tilevm.backend import launch

        # Forget the loaded module (kept alive by `kernel`) so the second compile goes
        # through specialization and the disk cache, not the in-process table.
        launch._LOADED.clear()
        t0 = time.perf_counter()
        tv.compile(_load_example(fresh=True).quantized_matmul, **constants)
        cached = time.perf_counter() - t0
    times = {"wdtype": wdtype, "group_size": group_size, "cold_s": cold, "cached_s": cached,
             "via": "examples/quantized_matmul.py"}
    _VARIANTS[key] = (kernel, times)
    return _VARIANTS[key]


def _kernels_package():
    """`tilevm.kernels` when it provides `quantize` and `quantized_matmul`, else None."""
    try:
        import tilevm.kernels as kernels
    except ImportError:
        return None
    if hasattr(kernels, "quantize") and hasattr(kernels, "quantized_matmul"):
        return kernels
    return None


def _from_kernels_package(kernels, w: Weights, act: str, M: int) -> Prepared:
    """The tilevm.kernels path: the generated codes and scales in the kernel's
    "fragments" format (packed on the GPU), `quantized_matmul(x, qw)` with tuning. The
    first call tunes (compiles and times every candidate schedule): its wall time is the
    "first call" figure; `cached_s` is a later call's host time (no compilation)."""
    import torch

    tdt = _torch_dtype(act)
    K, N = w.K, w.N
    Np = kernels.padded_n(N)
    codes, scales = w.codes, w.scales.to(tdt)  # bf16 activations: bf16 scales
    if Np != N:
        codes = torch.nn.functional.pad(codes, (0, Np - N))
        scales = torch.nn.functional.pad(scales, (0, Np - N), value=1.0)
    qw = kernels.QuantizedWeight(kernels.pack_weights(codes, w.wdtype, kernels.FRAGMENTS),
                                 scales, None, w.wdtype, w.group_size, (K, N),
                                 format=kernels.FRAGMENTS)
    out = torch.empty((M, N), dtype=tdt, device="cuda")
    x = torch.rand((M, K), device="cuda").to(tdt)
    t0 = time.perf_counter()
    kernels.quantized_matmul(x, qw, out=out)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    kernels.quantized_matmul(x, qw, out=out)
    torch.cuda.synchronize()
    cached = time.perf_counter() - t0
    schedule = kernels.tuned_schedule(x, qw)

    def fn(x):
        return kernels.quantized_matmul(x, qw, out=out, schedule=schedule)

    deq = qw.dequantize().to(torch.float64)  # bf16 scales round the generated ones
    return Prepared(fn, int(qw.nbytes), out, deq,
                    {"wdtype": w.wdtype, "group_size": w.group_size, "cold_s": None,
                     "cached_s": cached, "first_call_s": first, "schedule": str(schedule),
                     "via": "tilevm.kernels"}, "tilevm.kernels")


_KERNELS_FAILED: list[str] = []  # why the tilevm.kernels path failed (tried once)


def tilevm_matmul_factory(wdtype: str, group_size: int, act_dtype: str, M: int, N: int,
                          K: int, weights: Weights) -> Prepared:
    """The one place the benchmark reaches tilevm: a launchable `x[M, K] -> y[M, N]` for
    these `weights` (raises `Unsupported` with the reason for a configuration it cannot
    run). Uses `tilevm.kernels` where it provides `quantize` and `quantized_matmul`,
    else the example kernel compiled with `tv.compile(kernel, wdtype=, group_size=)` on
    weights packed by the example's own format (`pack_weights`)."""
    import torch

    kernels = _kernels_package()
    if kernels is not None and not _KERNELS_FAILED:
        try:
            return _from_kernels_package(kernels, weights, act_dtype, M)
        except Exception as err:
            _KERNELS_FAILED.append(f"{type(err).__name__}: {str(err)[:200]}")
    note = f"tilevm.kernels failed ({_KERNELS_FAILED[0]}); used the example" \
        if kernels is not None and _KERNELS_FAILED else ""
    reason = example_unsupported(wdtype, group_size, act_dtype, N, K)
    if reason:
        raise Unsupported(reason)
    example = _load_example()
    bits = dtypes.parse(wdtype).bits
    packed = pack_rows(weights.codes, bits)
    # The GPU packer must produce the example's format: compare a few rows with it.
    rows = min(K, 16)
    want = example.pack_weights(weights.codes[:rows].cpu().numpy(), wdtype)
    if not np.array_equal(packed[:rows].cpu().numpy(), want):
        raise RuntimeError("pack_rows disagrees with the example's pack_weights")
    kernel, times = _example_variant(wdtype, group_size)
    scales = weights.scales
    y = torch.empty((M, N), dtype=torch.float16, device="cuda")

    def fn(x):
        kernel(x, packed, scales, y, M, N, K)
        return y

    nbytes = int(packed.numel() + scales.numel() * scales.element_size())
    return Prepared(fn, nbytes, y, None, times, note or "examples/quantized_matmul.py")


# ---- baselines ------------------------------------------------------------------------------

def cublas_factory(act: str, M: int, N: int, K: int, generator) -> tuple[Prepared, Any]:
    """torch.matmul(x, W^T) with W [N, K] of the activation type (the F.linear layout);
    returns the launchable and its float64 weights [K, N] for the reference."""
    import torch

    w = (torch.rand((N, K), device="cuda", generator=generator) * 2 - 1).to(_torch_dtype(act))
    out = torch.empty((M, N), dtype=_torch_dtype(act), device="cuda")

    def fn(x):
        return torch.matmul(x, w.t(), out=out)

    return Prepared(fn, int(w.numel() * 2), out, None, {}, "torch.matmul"), w.t().double()


_GEMLITE: dict[str, Any] = {}


def gemlite_status(install_wheels: bool = False) -> dict[str, Any]:
    """Whether gemlite imports (after installing bench/wheels when asked), and why not."""
    if _GEMLITE:
        return _GEMLITE
    info: dict[str, Any] = {"wheels": sorted(p.name for p in WHEELS.glob("*.whl"))}
    if install_wheels and info["wheels"]:
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
               *map(str, sorted(WHEELS.glob("*.whl")))]
        done = subprocess.run(cmd, capture_output=True, text=True)
        info["install"] = "ok" if done.returncode == 0 else \
            f"failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-300:]}"
        importlib.invalidate_caches()
    try:
        import gemlite

        info.update(available=True, version=getattr(gemlite, "__version__", "?"))
    except Exception as err:  # not installed, or no Triton
        info.update(available=False, reason=f"{type(err).__name__}: {err}",
                    how="python -m pip install --no-deps bench/wheels/gemlite-*.whl (the "
                        "GPU machine has no network), or run with --install-wheels")
    _GEMLITE.update(info)
    return info


def gemlite_factory(w: Weights, act: str, M: int) -> Prepared:
    """gemlite's GemLiteLinear on the same weights: integer codes become HQQ's unsigned
    `W_q` with zero point -min (W = (W_q - zero) * scale), scales and zeros [N, K/g]."""
    import torch

    reason = gemlite_unsupported(w.wdtype, w.group_size, act, w.N, w.K)
    if reason:
        raise Unsupported(reason)
    if not _GEMLITE.get("available"):
        raise Unsupported(f"gemlite unavailable: {_GEMLITE.get('reason', 'not probed')}")
    from gemlite import DType, GemLiteLinear

    t = dtypes.parse(w.wdtype)
    offset = -int(t.min)  # int4: codes of -8..7 become W_q of 0..15 with zero point 8
    values = torch.as_tensor(decode_table(w.wdtype), device="cuda")
    q = torch.empty((w.N, w.K), dtype=torch.uint8, device="cuda")
    for rows in _row_chunks(w.K, w.N):
        q[:, rows] = (values[w.codes[rows].long()] + offset).to(torch.uint8).t()
    dt = _torch_dtype(act)
    scales = w.scales.t().contiguous().to(dt)
    zeros = torch.full_like(scales, float(offset))
    gd = {"f16": DType.FP16, "bf16": DType.BF16}[act]
    layer = GemLiteLinear(GEMLITE_BITS[w.wdtype], group_size=w.group_size, in_features=w.K,
                          out_features=w.N, input_dtype=gd, output_dtype=gd)
    layer.pack(q, scales, zeros, bias=None)
    del q
    nbytes = sum(int(t.numel() * t.element_size()) for t in (layer.W_q, layer.scales)
                 if isinstance(t, torch.Tensor))
    return Prepared(layer, nbytes, None, None, {}, f"gemlite {_GEMLITE.get('version')}")


# ---- one configuration ----------------------------------------------------------------------

def check(y, reference, tol: float) -> dict[str, Any]:
    """Compare a result with its float64 reference: max |y - ref| relative to rms(ref),
    which passes when finite and at most `tol` (see `tolerance`)."""
    import torch

    y64 = y.double()
    finite = bool(torch.isfinite(y64).all())
    diff = (y64 - reference).abs()
    max_abs = float(diff.max()) if finite else math.inf
    rms = float(reference.pow(2).mean().sqrt())
    rel = max_abs / max(rms, 1e-30)
    return {"check_passed": finite and rel <= tol, "max_abs_err": max_abs,
            "max_rel_err": rel, "tolerance": tol, "ref_rms": rms,
            "output_finite": finite}


def run_prepared(prep: Prepared, M: int, K: int, act: str, weights64, timer: Timer,
                 generator, tol: float) -> dict[str, Any]:
    """Poison, run once on fresh x, check against float64 x @ weights64, then time."""
    import torch

    x = (torch.rand((M, K), device="cuda", generator=generator) * 2 - 1).to(_torch_dtype(act))
    if prep.out is not None:
        prep.out.fill_(float("nan"))
    else:
        # fn allocates its output: leave a NaN block of that size in torch's cache, which
        # the allocation reuses, so stale correct data cannot pass the check.
        n = M * weights64.shape[1]
        torch.full((n,), float("nan"), dtype=_torch_dtype(act), device="cuda")
    t0 = time.perf_counter()
    y = prep.fn(x)
    torch.cuda.synchronize()
    first_call = time.perf_counter() - t0
    result = check(y, x.double() @ weights64, tol)
    result["first_call_s"] = first_call
    del y
    if not result["check_passed"]:
        return result
    seconds, reps, method = timer(lambda: prep.fn(x))
    # Host time to submit one launch (no sync in between): when it exceeds the kernel's
    # time, a real decode loop would be launch-bound, whatever the median says.
    t0 = time.perf_counter()
    for _ in range(20):
        prep.fn(x)
    host = (time.perf_counter() - t0) / 20
    torch.cuda.synchronize()
    result.update(seconds=seconds, reps=reps, timing=method, host_us_per_launch=host * 1e6)
    return result


def finish_row(row: dict, ceilings: dict, cublas_times: dict) -> dict:
    """Add the derived metrics (TB/s, TFLOP/s, roofline, speedups) to a timed row."""
    if row.get("seconds") is None:
        return row
    nbytes = traffic_bytes(row["M"], row["N"], row["K"], row["bits"], row["group_size"])
    flops = matmul_flops(row["M"], row["N"], row["K"])
    row.update(bytes=nbytes, flops=flops)
    row.update(metrics(row["seconds"], nbytes, flops, ceilings["copy_bw_bytes_per_s"],
                       ceilings["cublas_f16_tflops"] * 1e12))
    for act in ACTS:
        base = cublas_times.get((row["shape"], row["M"], act))
        row[f"speedup_vs_cublas_{act}"] = base / row["seconds"] if base else None
    row["speedup_vs_cublas"] = row.get(f"speedup_vs_cublas_{row['act']}")
    return row


def add_read_floor(row: dict, floor_seconds: float) -> dict:
    """Add the read floor of a finished row's bytes (`bench.read_floor`): its time, the
    fraction of it the kernel reaches and the roofline fraction the floor itself reaches
    (`t_roof / t_floor`: above it no kernel reading these bytes was measured)."""
    row.update(floor_us=floor_seconds * 1e6, floor_fraction=floor_seconds / row["seconds"],
               attainable_roofline=row["t_roof_us"] / (floor_seconds * 1e6))
    return row


# ---- the run --------------------------------------------------------------------------------

def environment() -> dict[str, Any]:
    """GPU, driver, library versions."""
    import torch

    props = torch.cuda.get_device_properties(0)
    env: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0), "sm_count": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "capability": f"{props.major}.{props.minor}", "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda, "python": sys.version.split()[0],
        "host": platform.node(), "driver": None, "triton": None}
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        env["driver"] = driver.decode() if isinstance(driver, bytes) else driver
    except Exception:  # no NVML: ask nvidia-smi
        with contextlib.suppress(Exception):
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
    with contextlib.suppress(Exception):
        import triton

        env["triton"] = triton.__version__
    with contextlib.suppress(Exception):
        from tilevm import __version__

        env["tilevm"] = __version__
    # TILEVM_COMMIT names the measured commit where the tree's .git may be stale (a
    # copied working tree); else git's HEAD, marked "-dirty" when the tree differs.
    env["tilevm_commit"] = os.environ.get("TILEVM_COMMIT")
    with contextlib.suppress(Exception):
        if env["tilevm_commit"] is None:
            head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                                  capture_output=True, text=True, timeout=10).stdout.strip()
            dirty = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD"],
                                   capture_output=True, timeout=10).returncode != 0
            env["tilevm_commit"] = (head + ("-dirty" if dirty else "")) or None
    return env


def _base_row(c: Config) -> dict[str, Any]:
    row = asdict(c)
    row.update(bits=c.bits, status="skip", reason=None, check_passed=None)
    return row


def run_benchmark(options: Options, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure everything `options` selects; the report (see the module docstring)."""
    import torch

    start = time.perf_counter()
    generator = torch.Generator(device="cuda")
    generator.manual_seed(options.seed)
    env = environment()
    log(f"qmm: {env['gpu']}, torch {env['torch']}, triton {env['triton']}")
    timer = Timer(options.min_reps, options.l2_flush)
    ceilings = measure_ceilings(timer)
    log(f"ceilings: copy {ceilings['copy_bw_bytes_per_s'] / 1e12:.2f} TB/s, cuBLAS f16 "
        f"{ceilings['cublas_f16_tflops']:.0f} / bf16 {ceilings['cublas_bf16_tflops']:.0f} "
        "TFLOP/s")
    gem = gemlite_status(options.install_wheels) if "gemlite" in options.backends else \
        {"available": False, "reason": "not selected"}
    kernels = _kernels_package()
    report: dict[str, Any] = {
        "benchmark": "qmm", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "environment": env, "ceilings": ceilings,
        "timing": {"method": timer.method, "min_reps": options.min_reps,
                   "check": "max |y - x @ dequantize(W)| / rms(ref), float64 reference on "
                            "the GPU, output poisoned with NaN first",
                   "tolerance": TOLERANCE,
                   "tolerance_factor": BACKEND_TOLERANCE_FACTOR},
        "roofline": "t_roof = max(bytes / copy_bw, flops / cublas_f16_peak); bytes = N*K*b/8 "
                    "+ (N*K/g)*2 + 2*M*K + 2*M*N (b = 16 and no scales for cuBLAS); "
                    "flops = 2*M*N*K",
        "tilevm_via": "tilevm.kernels" if kernels is not None else
                      "examples/quantized_matmul.py (tilevm.kernels has no quantize/"
                      "quantized_matmul yet)",
        "gemlite": gem,
        "options": {k: v for k, v in asdict(options).items()},
        "results": [], "compile": []}
    configs = plan(options)
    cublas_times: dict[tuple[str, int, str], float] = {}
    rows: list[dict] = []
    weights: Weights | None = None
    for i, c in enumerate(configs):
        row = _base_row(c)
        rows.append(row)
        elapsed = time.perf_counter() - start
        if options.budget_s and elapsed > options.budget_s:
            row["reason"] = f"time budget of {options.budget_s:.0f} s spent (--budget-s)"
            continue
        try:
            if c.backend == "cublas":
                prep, w64 = cublas_factory(c.act, c.M, c.N, c.K, generator)
            else:
                if weights is None or (weights.wdtype, weights.N, weights.K) != \
                        (c.wdtype, c.N, c.K):
                    weights = None
                    torch.cuda.empty_cache()
                    weights = make_weights(c.wdtype, c.group_size, c.N, c.K, generator)
                if c.backend == "tilevm":
                    prep = tilevm_matmul_factory(c.wdtype, c.group_size, c.act, c.M, c.N,
                                                 c.K, weights)
                else:
                    prep = gemlite_factory(weights, c.act, c.M)
                w64 = prep.dequantized if prep.dequantized is not None \
                    else weights.dequantized
            row["note"] = prep.note
            row["weight_bytes"] = prep.weight_bytes
            if prep.compile:
                row["compile"] = prep.compile
                if prep.compile not in report["compile"]:
                    report["compile"].append(prep.compile)
            row.update(run_prepared(prep, c.M, c.K, c.act, w64, timer, generator,
                                    tolerance(c.backend, c.act)))
            del prep, w64
            if row["check_passed"]:
                row["status"] = "ok"
                if c.backend == "cublas":
                    cublas_times[(c.shape, c.M, c.act)] = row["seconds"]
            else:
                row["status"] = "fail"
                row["reason"] = f"wrong result: max err {row['max_rel_err']:.3g} x rms > " \
                                f"{row['tolerance']:.3g}" + \
                                ("" if row["output_finite"] else " (non-finite output)")
        except Unsupported as err:
            row["reason"] = str(err)
        except Exception as err:
            row["status"] = "error"
            row["reason"] = f"{type(err).__name__}: {str(err).strip()[:300]}"
        if row["status"] != "skip" or i % 50 == 0:
            log(_progress(i, len(configs), row, time.perf_counter() - start))
    for row in rows:
        finish_row(row, ceilings, cublas_times)
    if options.read_floor:
        measure_read_floors(rows, timer, report, log)
    report["results"] = rows
    report["elapsed_s"] = time.perf_counter() - start
    return report


def measure_read_floors(rows: list[dict], timer: Timer, report: dict,
                        log: Callable[[str], None]) -> None:
    """`add_read_floor` to every timed memory-bound row, one floor per byte count."""
    from tilevm.bench.read_floor import read_floor_seconds

    floors: dict[int, dict] = {}
    for row in rows:
        if row.get("seconds") is None or row.get("bound") != "memory":
            continue
        nbytes = int(row["bytes"])
        if nbytes not in floors:
            floors[nbytes] = read_floor_seconds(timer, nbytes)
            log(f"read floor of {nbytes / 1e6:.1f} MB: "
                f"{floors[nbytes]['seconds'] * 1e6:.1f} us")
        add_read_floor(row, floors[nbytes]["seconds"])
    report["read_floor"] = {
        "method": "bench/read_floor.py: stream_read (256 threads, 16-byte loads), the "
                  "fastest of its chunk sizes and loads in flight (CONFIGS), timed by this "
                  "run's timer", "floors": [{"bytes": b, **f} for b, f in floors.items()]}


def _progress(i: int, n: int, row: dict, elapsed: float) -> str:
    what = f"[{i + 1}/{n} {elapsed:5.0f}s] {row['backend']} {row['shape']} M={row['M']} " \
           f"{row['wdtype']} {row['act']}: "
    if row["status"] == "ok":
        return what + f"{row['seconds'] * 1e6:.1f} us (max err {row['max_rel_err']:.2g})"
    return what + f"{row['status']} {row.get('reason') or ''}"


def plot(report: dict, path: str) -> str | None:
    """qmm.png: fraction of roofline against M, one line per weight type (and cuBLAS),
    one panel per (shape, activation), tilevm solid and gemlite dashed. Returns why it was
    skipped, or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as err:
        return f"matplotlib unavailable: {type(err).__name__}: {err}"
    ok = [r for r in report["results"] if r["status"] == "ok"]
    panels = list(dict.fromkeys((r["shape"], r["act"]) for r in ok))
    if not panels:
        return "no timed results to plot"
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4.2 * rows), squeeze=False)
    styles = {"tilevm": "-", "gemlite": "--", "cublas": ":"}
    for ax, (shape, act) in zip(axes.flat, panels):
        lines: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for r in ok:
            if (r["shape"], r["act"]) == (shape, act):
                lines.setdefault((r["backend"], r["wdtype"]), []).append(
                    (r["M"], r["roofline_fraction"]))
        for (backend, wdtype), points in lines.items():
            points.sort()
            label = wdtype if backend == "tilevm" else f"{backend} {wdtype}"
            ax.plot([p[0] for p in points], [p[1] for p in points], styles[backend],
                    marker="o", markersize=3, label=label,
                    color="black" if backend == "cublas" else None)
        ax.set_xscale("log", base=2)
        top = max([1.0] + [f for points in lines.values() for _, f in points])
        ax.set_ylim(0, 1.05 * top)  # a kernel can beat the run's measured ceilings
        ax.set_title(f"{shape} ({act} activations)")
        ax.set_xlabel("M")
        ax.set_ylabel("fraction of roofline")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"quantized matmul, {report['environment']['gpu']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def write_outputs(report: dict, out: str) -> None:
    """qmm.json, qmm.md (and qmm.png when there is something to plot) in `out`."""
    os.makedirs(out, exist_ok=True)
    skipped = plot(report, os.path.join(out, "qmm.png")) if report.get("results") else \
        "nothing was timed"
    report["plot"] = {"file": "qmm.png"} if skipped is None else {"skipped": skipped}
    with open(os.path.join(out, "qmm.md"), "w") as f:
        f.write(format_markdown(report))
    with open(os.path.join(out, "qmm.json"), "w") as f:
        json.dump(jsonable(report), f, indent=1)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 when it ran or was skipped for want of a GPU, 1 when a kernel
    gave a wrong result or raised."""
    options = parse_options(argv)
    reason = gpu_unavailable_reason()
    if reason:
        report = {"benchmark": "qmm", "status": "skipped", "reason": reason,
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                  "options": asdict(options), "results": []}
        write_outputs(report, options.out)
        print(f"qmm: skipped: {reason}; wrote {os.path.join(options.out, 'qmm.json')}")
        return 0
    # A fresh kernel cache: the first compile of each variant is cold.
    cache = tempfile.mkdtemp(prefix="tilevm-qmm-cache-")
    saved = os.environ.get("TILEVM_CACHE_DIR")
    os.environ["TILEVM_CACHE_DIR"] = cache
    try:
        report = run_benchmark(options)
    finally:
        if saved is None:
            os.environ.pop("TILEVM_CACHE_DIR", None)
        else:
            os.environ["TILEVM_CACHE_DIR"] = saved
        shutil.rmtree(cache, ignore_errors=True)
    report["status"] = "ran"
    write_outputs(report, options.out)
    print(f"wrote {options.out}/qmm.json, qmm.md"
          + (", qmm.png" if "file" in report.get("plot", {}) else
             f" (no plot: {report.get('plot', {}).get('skipped')})")
          + f" in {report['elapsed_s']:.0f} s")
    print(format_summary(report["results"], report["ceilings"]))
    return 1 if any(r["status"] in ("fail", "error") for r in report["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
