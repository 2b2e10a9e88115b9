"""`vmc tune`: the searches on the GPU, and one legal reordering of a PTX file.

    vmc tune FILE.py[:KERNEL] [--set NAME=VALUE ...] [--steps N] [--seed S] [-o OUT.ptx]
    vmc tune --qmm WDTYPE --shape M,N,K [--group-size G] [--level3 N] [--steps N]
             [--budget S] [--seed S] [--no-verify] [-o REPORT.json]
    vmc tune --permute FILE.ptx [--seed S] [-o OUT.ptx]

The first anneals the order of an example kernel's compiled PTX on the GPU
(`tune.order_search`) on two random problems of the file's `example_inputs` (the first
timed), and writes the fastest bit-exact order. The second tunes the library's
quantized matmul for one problem: the grid timed in the runner
(`kernels.qmm_search.grid_schedule`), then levels 1, 2 (and 3) with the final checks
(`tune_problem`); the kept schedule, with its PTX order where level 2 kept one, goes
into the tuning cache under the key the library looks up (`kernels.matmul.problem_key`;
the library runs that order, `tune.variants.ordered_ptx`), and a JSON report to the
output. The
third writes one random legal reordering (`tune.ptx_order`), for inspection and tests:
ptxas accepts it, and the kernel computes the same values.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import asdict
from typing import Any

import numpy as np

from tilevm.cli.common import (
    CLIError,
    example_problem,
    load_target,
    non_negative_int,
    require_gpu,
    settings_of,
    split_target,
    write_output,
)
from tilevm.kernels.matmul import problem_key
from tilevm.kernels.qmm_problem import QmmProblem
from tilevm.kernels.qmm_search import grid_schedule, tune_problem
from tilevm.kernels.weight_format import code_type
from tilevm.tune.cache import cache_file, store
from tilevm.tune.order_search import OrderSearch, search_order
from tilevm.tune.ptx_order import PtxOrder, PtxOrderError, ptx_digest
from tilevm.tune.variants import compiled_ptx


def cmd_tune(args: argparse.Namespace) -> None:
    modes = [args.target is not None, args.permute is not None, args.qmm is not None]
    if sum(modes) != 1:
        raise CLIError("give one of: a kernel to tune (FILE.py[:KERNEL]), --qmm WDTYPE "
                       "--shape M,N,K (the library's quantized matmul), --permute FILE.ptx")
    if args.qmm is None and (args.shape or args.level3 or args.no_verify):
        raise CLIError("--shape, --level3 and --no-verify go with --qmm")
    if not args.budget > 0:
        raise CLIError(f"--budget must be a positive number of seconds, got {args.budget}")
    text = _permuted(args) if args.permute else _tuned_qmm(args) if args.qmm \
        else _searched(args)
    write_output(args.output, text)


def _permuted(args: argparse.Namespace) -> str:
    try:
        with open(args.permute) as f:
            text = f.read()
    except OSError as err:
        raise CLIError(f"cannot read {args.permute}: {err.strerror}") from None
    try:
        order = PtxOrder.parse(text)
    except PtxOrderError as err:
        raise CLIError(f"{args.permute}: {err}") from None
    runs = order.runs
    print(f"{sum(len(r.instructions) for r in runs)} movable instructions in {len(runs)} "
          f"runs, seed {args.seed}", file=sys.stderr)
    return order.permuted(random.Random(args.seed))


def _searched(args: argparse.Namespace) -> str:
    path, _ = split_target(args.target)
    module, kernel = load_target(args.target)
    settings = settings_of(args.set)
    device = require_gpu(f"the search times {kernel.name} on one")
    problems = [example_problem(module, kernel, path, settings,
                                np.random.default_rng(args.seed + i)) for i in range(2)]
    program = problems[0][2]
    result = search_order(program, [p[0] for p in problems],
                          steps=200 if args.steps is None else args.steps,
                          seed=args.seed, budget_s=args.budget)
    print(f"{kernel.name} on {device.name}: {result.start_s * 1e6:.2f} us compiled, "
          f"{result.best_s * 1e6:.2f} us best ({result.start_s / result.best_s:.3f}x) after "
          f"{len(result.annealing.trace)} steps: {result.ran} run, {result.repeated} "
          f"repeated, {result.rejected} rejected", file=sys.stderr)
    return result.ptx


def _tuned_qmm(args: argparse.Namespace) -> str:
    try:
        wdtype = code_type(args.qmm)
    except (ValueError, KeyError) as err:
        raise CLIError(f"--qmm: {err}") from None
    M, N, K = _shape(args.shape)
    if K % args.group_size:
        raise CLIError(f"--shape: K = {K} is not a multiple of the group size "
                       f"{args.group_size}")
    device = require_gpu("the quantized matmul is tuned by timing it on one")
    hopper = device.arch == "sm_90a"
    where = f"{wdtype} g{args.group_size} M={M} N={N} K={K} on {device.name}"
    print(f"timing the grid for {where}", file=sys.stderr)
    # the random weights and inputs, made once for the grid and every search
    problem = QmmProblem(wdtype, M, N, K, group_size=args.group_size, seed=args.seed)
    start, grid_s, timed = grid_schedule(wdtype, M, N, K, hopper=hopper,
                                         group_size=args.group_size, problem=problem)
    print(f"  the grid's best of {timed}: {start} ({grid_s * 1e6:.2f} us)", file=sys.stderr)
    steps = {} if args.steps is None else {"level1_steps": args.steps,
                                           "level2_steps": args.steps}
    tuned = tune_problem(wdtype, M, N, K, start=start, hopper=hopper, seed=args.seed,
                         budget_s=args.budget, level3_steps=args.level3 if hopper else 0,
                         group_size=args.group_size, verify=not args.no_verify,
                         problem=problem, progress=lambda line: print(f"  {line}",
                                                                      file=sys.stderr),
                         **steps)
    for level, kernel in tuned.after.items():
        print(f"  after {level}: {tuned.times_s[level] * 1e6:.2f} us  {kernel.schedule}"
              f"{'  (PTX order moved)' if kernel.ptx else ''}"
              f"{'  (control bits edited)' if kernel.cubin else ''}", file=sys.stderr)
    checks = tuned.samples
    if checks is not None:
        print(f"  checks: {checks.samples:,} values against float64 "
              f"{'passed' if checks.passed else 'FAILED: ' + '; '.join(checks.failures)}; "
              + ", ".join(f"{s.tool} {'clean' if s.clean else 'NOT clean'}"
                          for s in tuned.sanitizers), file=sys.stderr)
    for level in tuned.undone:
        print(f"  undone: {level}", file=sys.stderr)
    key = problem_key(device.name, problem.timed, M)
    entry = {"schedule": asdict(tuned.schedule), "us": round(tuned.kept_s * 1e6, 2),
             "search": {"grid": asdict(start), "seed": args.seed,
                        "times_us": {k: round(v * 1e6, 3) for k, v in tuned.times_s.items()},
                        "values_checked": checks.samples if checks else None,
                        "wall_s": round(tuned.wall_s, 1)}}
    if tuned.kernel.ptx is not None:  # level 2's order, in the table's form
        entry["ptx_order"] = stored_order(problem.program(tuned.schedule), tuned.level2)
    if checks is None or checks.passed and all(s.clean for s in tuned.sanitizers):
        store(key, entry)
        print(f"stored in {cache_file()} as {key}", file=sys.stderr)
    else:
        print("not stored: the kept kernel failed its checks", file=sys.stderr)
    if tuned.kernel.cubin:
        print("note: the library runs the compiled machine code; the control-bit edits "
              "are not stored", file=sys.stderr)
    return json.dumps({"key": key, **entry, "speedup": tuned.speedup}, indent=1) + "\n"


def stored_order(program: Any, search: OrderSearch) -> dict[str, Any]:
    """The tuning table's form of a level-2 winner (`tune.variants.ordered_ptx` reads
    it): the runs it moves and the digest of the compiled text it was found on."""
    ptx = compiled_ptx(program)
    return {"of": ptx_digest(ptx), "runs": PtxOrder.parse(ptx).moved(search.annealing.best)}


def _shape(text: str | None) -> tuple[int, int, int]:
    if text is None:
        raise CLIError("--qmm needs --shape M,N,K (the rows of x, the output features, "
                       "the input features)")
    try:
        M, N, K = (int(v) for v in text.split(","))
    except ValueError:
        raise CLIError(f"--shape takes M,N,K as three integers, got {text!r}") from None
    if min(M, N, K) < 1:
        raise CLIError(f"--shape: M, N and K must be positive, got {text!r}")
    return M, N, K


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "tune", help="search a kernel's instruction order on the GPU, or reorder a PTX file",
        description="With --qmm WDTYPE --shape M,N,K: time the library quantized matmul's "
                    "grid, anneal its schedule, its PTX order (and with --level3 its "
                    "machine code's control bits), check the kept kernel on 10^7 values "
                    "and under compute-sanitizer, and store the schedule in the tuning "
                    "cache. With FILE.py[:KERNEL]: anneal the order of the kernel's "
                    "compiled PTX on the GPU, each order run in a child process and kept "
                    "only if its outputs are bitwise equal to the compiled kernel's, and "
                    "write the fastest. With --permute FILE.ptx: write one legal "
                    "reordering (each run of straight-line code between barriers, fences, "
                    "labels and branches in a random order that keeps every register and "
                    "memory dependency). "
                    "docs/tuning.md.",
        epilog="examples: vmc tune examples/attention.py --set d=128 --set S=2048 -o att.ptx\n"
               "          vmc tune --qmm int4 --shape 16,12288,4096\n"
               "          vmc tune --permute qmm.ptx --seed 3 -o qmm.3.ptx",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", nargs="?", metavar="FILE.py[:KERNEL]",
                   help="the example file, and the kernel's name if it defines several")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="a setting for example_inputs: a problem size or a compile-time "
                        "constant; repeatable")
    p.add_argument("--permute", metavar="FILE.ptx", help="reorder this PTX file instead")
    p.add_argument("--qmm", metavar="WDTYPE",
                   help="tune the library's quantized matmul for this weight type (int4, "
                        "int3, f6e3m2, ...) instead; with --shape")
    p.add_argument("--shape", metavar="M,N,K", help="the quantized matmul's problem")
    p.add_argument("--group-size", type=int, default=128, metavar="G",
                   help="the weights' group size (default 128)")
    p.add_argument("--level3", type=non_negative_int, default=0, metavar="N",
                   help="with --qmm on sm_90: N proposals of control-bit edits of the "
                        "machine code (default 0: off)")
    p.add_argument("--no-verify", action="store_true",
                   help="with --qmm: skip the final checks (10^7 values, compute-sanitizer)")
    p.add_argument("--steps", type=non_negative_int, default=None, metavar="N",
                   help="proposals of each search (default 200 for a file's order; 60 and "
                        "150 for the quantized matmul's levels 1 and 2)")
    p.add_argument("--budget", type=float, default=600.0, metavar="SECONDS",
                   help="the search's time limit (default 600)")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="the seed (default 0; the same seed, the same order or trajectory)")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="where to write the PTX, or --qmm's JSON report (default: "
                        "standard output)")
    p.set_defaults(func=cmd_tune)
