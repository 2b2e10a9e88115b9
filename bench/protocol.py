"""What the quantized matmul benchmark (`bench.qmm`) measures and how a run selects it:
the protocol's matrix (Llama-3 layer shapes, batch sizes M, weight and activation types),
the presets, the checks' tolerances, the command line (`build_parser`, `parse_options`
-> `Options`) and the configurations a run times, in order (`plan` -> `Config`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tilevm import dtypes
from tilevm.bench.timing import L2_FLUSHES, MIN_REPS

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
BACKENDS = ["tilevm", "cublas", "gemlite", "humming"]
PEERS = ("gemlite", "humming")  # the quantized baselines, each timed on its own weight types
METHODS = ["graph", "isolated"]  # ../shared/BENCHMARKS.md; graph is the headline
GROUP_SIZE = 128

# Presets. The default fits a time budget (--budget-s enforces it); --quick is the smoke
# test: the literature's three comparison types on the 8B qkv layer. gemlite's first call
# of each shape and M compiles Triton kernels, which is slow, so the default and quick
# runs time it on int4 only.
DEFAULT = {"shapes": SHAPE_GROUPS["8b"] + ["ragged_n"], "m": M_VALUES + [RAGGED_M],
           "dtypes": WEIGHT_TYPES, "act": ["f16"], "budget_s": 480.0,
           "gemlite_dtypes": ["int4"], "humming_dtypes": ["int4", "int3", "f6e3m2"]}
QUICK = {"shapes": ["8b.qkv"], "m": [1, RAGGED_M, 4096], "dtypes": ["int4", "int3", "f6e3m2"],
         "act": ["f16"], "budget_s": 240.0, "gemlite_dtypes": ["int4"],
         "humming_dtypes": ["int4"]}
FULL = {"shapes": list(SHAPES), "m": M_VALUES + [RAGGED_M], "dtypes": WEIGHT_TYPES,
        "act": ACTS, "budget_s": 0.0, "gemlite_dtypes": WEIGHT_TYPES,
        "humming_dtypes": WEIGHT_TYPES}

# Check tolerance: max |y - ref| / rms(ref). The kernels round each dequantized weight and
# the output to the activation type (unit roundoff 2^-11 for f16, 2^-9 for bf16; the
# largest outputs are ~5x the rms), so a correct kernel sits well below these and a wrong
# one (a misread bit field, a missing scale) is off by O(1).
TOLERANCE = {"f16": 2.0 ** -7, "bf16": 2.0 ** -4}
# gemlite's M=1 GEMV adds its split-K partial sums into the f16 output with atomics (its
# fma-form zero points add a per-group rounding too): a baseline property, not a bug,
# that puts its error above the f16 bound. Its checks get 4x the tolerance.
BACKEND_TOLERANCE_FACTOR = {"gemlite": 4.0}


def tolerance(backend: str, act: str) -> float:
    """The check's bound on max |y - ref| / rms(ref) for a backend and activation type."""
    return TOLERANCE[act] * BACKEND_TOLERANCE_FACTOR.get(backend, 1.0)


def torch_dtype(act: str) -> Any:
    """The torch dtype of an activation type name (imports torch)."""
    import torch

    return {"f16": torch.float16, "bf16": torch.bfloat16}[act]


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
    humming_dtypes: list[str] = field(default_factory=lambda: ["int4"])
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    l2_flush: str = "write"
    read_floor: bool = False
    resume: bool = False


def peer_dtypes(options: Options, backend: str) -> list[str] | None:
    """The weight types a quantized baseline is timed on (None: tilevm, every type)."""
    return {"gemlite": options.gemlite_dtypes, "humming": options.humming_dtypes}.get(backend)


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
                        help="comma list of tilevm, cublas, gemlite, humming (default: all)")
    parser.add_argument("--gemlite-dtypes",
                        help="weight types gemlite is timed on (comma list, or all; "
                             "default int4, --full all); it runs the integer 2/4/8-bit ones")
    parser.add_argument("--humming-dtypes",
                        help="weight types Humming is timed on (comma list, or all; default "
                             "int4,int3,f6e3m2, --quick int4, --full all); its first call of "
                             "a type and shape compiles CUDA C++ with nvcc")
    parser.add_argument("--methods", default=",".join(METHODS),
                        help="how each kernel is timed (comma list): graph (R weight "
                             "copies over 3x L2, ~60 calls replayed from a CUDA graph: the "
                             "headline), isolated (one call after an L2 flush); default both")
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
    parser.add_argument("--resume", action="store_true",
                        help="add to OUT_DIR/qmm.json: keep its measured rows and time only "
                             "the configurations it lacks or skipped (same GPU and timing "
                             "options; see bench/resume.py)")
    parser.add_argument("--install-wheels", action="store_true",
                        help="pip install --no-deps --no-index the wheels in bench/wheels "
                             "(gemlite, Humming and what they need) before the run")
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
        methods = parse_choices(args.methods, METHODS, "method")
        gemlite_dtypes, humming_dtypes = (
            parse_choices(given, WEIGHT_TYPES, "weight type") if given else list(preset[key])
            for given, key in ((args.gemlite_dtypes, "gemlite_dtypes"),
                               (args.humming_dtypes, "humming_dtypes")))
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
                   gemlite_dtypes=gemlite_dtypes, humming_dtypes=humming_dtypes,
                   methods=methods, l2_flush=args.l2_flush,
                   read_floor=args.read_floor, resume=args.resume)


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
                                for b in ("tilevm", *PEERS) if b in options.backends
                                and wdtype in (peer_dtypes(options, b) or [wdtype])]
    return configs


