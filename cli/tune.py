"""`vmc tune`: tuning tools. For now one: `--permute FILE.ptx`, one legal reordering of
a PTX file's instructions (`tune.ptx_order`), for inspection and tests; ptxas must
accept what it writes, and the kernel computes the same values."""

from __future__ import annotations

import argparse
import random
import sys
from typing import Any

from tilevm.cli.common import CLIError
from tilevm.tune.ptx_order import PtxOrder, PtxOrderError


def cmd_tune(args: argparse.Namespace) -> None:
    try:
        with open(args.permute) as f:
            text = f.read()
    except OSError as err:
        raise CLIError(f"cannot read {args.permute}: {err.strerror}") from None
    try:
        order = PtxOrder.parse(text)
    except PtxOrderError as err:
        raise CLIError(f"{args.permute}: {err}") from None
    out = order.permuted(random.Random(args.seed))
    if args.output and args.output != "-":
        try:
            with open(args.output, "w") as f:
                f.write(out)
        except OSError as err:
            raise CLIError(f"cannot write {args.output}: {err.strerror}") from None
        runs = order.runs
        print(f"wrote {args.output}: {sum(len(r.instructions) for r in runs)} movable "
              f"instructions in {len(runs)} runs, seed {args.seed}", file=sys.stderr)
    else:
        sys.stdout.write(out)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "tune", help="tuning tools: a legal reordering of a PTX file (--permute)",
        description="Write one legal reordering of FILE.ptx's instructions: each run of "
                    "straight-line code between barriers, fences, labels and branches in a "
                    "random order that keeps every register and memory dependency "
                    "(docs/tuning.md).",
        epilog="example: vmc tune --permute qmm.ptx --seed 3 -o qmm.3.ptx",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--permute", required=True, metavar="FILE.ptx",
                   help="the PTX file to reorder")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="the random order's seed (default 0; the same seed, the same order)")
    p.add_argument("-o", "--output", metavar="OUT.ptx",
                   help="where to write it (default: standard output)")
    p.set_defaults(func=cmd_tune)
