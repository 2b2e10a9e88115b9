"""`vmc tune`: the search over a kernel's instruction order, and one legal reordering of a
PTX file.

    vmc tune FILE.py[:KERNEL] [--set NAME=VALUE ...] [--steps N] [--seed S] [-o OUT.ptx]
    vmc tune --permute FILE.ptx [--seed S] [-o OUT.ptx]

The first anneals the order of an example kernel's compiled PTX on the GPU
(`tune.order_search`) on two random problems of the file's `example_inputs` (the first
timed), and writes the fastest bit-exact order. The second writes one random legal
reordering (`tune.ptx_order`), for inspection and tests: ptxas accepts it, and the kernel
computes the same values.
"""

from __future__ import annotations

import argparse
import random
import sys
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
from tilevm.tune.order_search import search_order
from tilevm.tune.ptx_order import PtxOrder, PtxOrderError


def cmd_tune(args: argparse.Namespace) -> None:
    if (args.target is None) == (args.permute is None):
        raise CLIError("give a kernel to tune (FILE.py[:KERNEL]) or --permute FILE.ptx, "
                       "not both")
    write_output(args.output, _permuted(args) if args.permute else _searched(args))


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
    if not args.budget > 0:
        raise CLIError(f"--budget must be a positive number of seconds, got {args.budget}")
    path, _ = split_target(args.target)
    module, kernel = load_target(args.target)
    settings = settings_of(args.set)
    device = require_gpu(f"the search times {kernel.name} on one")
    problems = [example_problem(module, kernel, path, settings,
                                np.random.default_rng(args.seed + i)) for i in range(2)]
    program = problems[0][2]
    result = search_order(program, [p[0] for p in problems], steps=args.steps,
                          seed=args.seed, budget_s=args.budget)
    print(f"{kernel.name} on {device.name}: {result.start_s * 1e6:.2f} us compiled, "
          f"{result.best_s * 1e6:.2f} us best ({result.start_s / result.best_s:.3f}x) after "
          f"{len(result.annealing.trace)} steps: {result.ran} run, {result.repeated} "
          f"repeated, {result.rejected} rejected", file=sys.stderr)
    return result.ptx


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "tune", help="search a kernel's instruction order on the GPU, or reorder a PTX file",
        description="With FILE.py[:KERNEL]: anneal the order of the kernel's compiled PTX "
                    "on the GPU, each order run in a child process and kept only if its "
                    "outputs are bitwise equal to the compiled kernel's, and write the "
                    "fastest. With --permute FILE.ptx: write one legal reordering (each run "
                    "of straight-line code between barriers, fences, labels and branches in "
                    "a random order that keeps every register and memory dependency). "
                    "docs/tuning.md.",
        epilog="examples: vmc tune examples/attention.py --set d=128 --set S=2048 -o att.ptx\n"
               "          vmc tune --permute qmm.ptx --seed 3 -o qmm.3.ptx",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", nargs="?", metavar="FILE.py[:KERNEL]",
                   help="the example file, and the kernel's name if it defines several")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="a setting for example_inputs: a problem size or a compile-time "
                        "constant; repeatable")
    p.add_argument("--permute", metavar="FILE.ptx", help="reorder this PTX file instead")
    p.add_argument("--steps", type=non_negative_int, default=200, metavar="N",
                   help="proposals of the search (default 200)")
    p.add_argument("--budget", type=float, default=600.0, metavar="SECONDS",
                   help="the search's time limit (default 600)")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="the seed (default 0; the same seed, the same order or trajectory)")
    p.add_argument("-o", "--output", metavar="OUT.ptx",
                   help="where to write the PTX (default: standard output)")
    p.set_defaults(func=cmd_tune)
