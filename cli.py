"""`vmc`: the tilevm command line.

    vmc dtypes               every data type with its range
    vmc dtypes f6e3m2        the full value table of one type (code, bits, value)

Errors go to stderr as one line and exit with status 2 (bad usage or input) or 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from tilevm import __version__, dtypes


class CLIError(Exception):
    """A problem with what the user asked for; printed without a traceback."""


def _cmd_dtypes(args: argparse.Namespace) -> None:
    if not args.names:
        print(dtypes.summary_table())
        return
    for i, name in enumerate(args.names):
        try:
            dtype = dtypes.parse(name)
            table = dtypes.value_table(dtype)
        except dtypes.DTypeError as err:
            raise CLIError(str(err)) from None
        if i:
            print()
        print(f"# {dtype.name}")
        print(table)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vmc", description="tilevm: a low-precision GPU virtual machine and compiler.")
    parser.add_argument("--version", action="version", version=f"vmc (tilevm) {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("dtypes", help="list data types, or print value tables",
                       description="Without NAME: every data type with its range. With NAMEs: "
                                   "the full value table (code, bits, value) of each 1..8-bit "
                                   "type.")
    p.add_argument("names", nargs="*", metavar="NAME", help="a type name such as f6e3m2 or int3")
    p.set_defaults(func=_cmd_dtypes)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], None] = args.func
    try:
        func(args)
    except CLIError as err:
        print(f"vmc {args.command}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `vmc dtypes | head`
        sys.stderr.close()
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
