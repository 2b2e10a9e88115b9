"""`vmc`: the tilevm command line.

    vmc dtypes               every data type with its range
    vmc dtypes f6e3m2        the full value table of one type (code, bits, value)
    vmc layout "local(2,1).spatial(8,4)" [--bits 4] [--svg out.svg]
                             a register layout's owners per element; a shared layout's
                             byte offsets or banks ("swizzled((8, 64), f16)" --show bank)

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


def _cmd_layout(args: argparse.Namespace) -> None:
    from tilevm.layouts import RegisterLayout, SharedLayout, parse_layout, picture

    try:
        layout = parse_layout(args.expression)
        if isinstance(layout, RegisterLayout):
            print(f"# {layout}: shape {list(layout.shape)}, {layout.num_threads} threads, "
                  f"{layout.local_size} registers per thread, replication {layout.replication}")
            print(picture.to_text(layout, element_bits=args.bits))
            svg = picture.to_svg(layout, element_bits=args.bits) if args.svg else None
        elif isinstance(layout, SharedLayout):
            print(f"# {layout}: {layout.size_bytes} bytes, {args.show} of each element")
            print(layout.to_text(show=args.show), end="")
            svg = layout.to_svg() if args.svg else None
        else:
            raise CLIError(f"{args.expression!r} is not a layout")
    except ValueError as err:  # LayoutError and DTypeError are ValueErrors
        raise CLIError(str(err)) from None
    if svg is not None:
        try:
            with open(args.svg, "w") as f:
                f.write(svg)
        except OSError as err:
            raise CLIError(f"cannot write {args.svg}: {err.strerror}") from None
        print(f"wrote {args.svg}", file=sys.stderr)


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

    p = sub.add_parser(
        "layout", help="draw a register or shared layout",
        description="Print a layout given in the layout syntax of docs/layouts.md: for a "
                    "register layout, the owners T{thread}:R{register} of every element; for "
                    "a shared layout, every element's byte offset, bit offset or bank.",
        epilog='examples: vmc layout "local(2,1).spatial(8,4).local(1,2)" --svg out.svg\n'
               '          vmc layout "mma_m16n8k16_a()"\n'
               '          vmc layout "swizzled((8, 64), f16)" --show bank',
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("expression", metavar="LAYOUT", help="a layout expression")
    p.add_argument("--svg", metavar="FILE", help="also write an SVG picture to FILE")
    p.add_argument("--bits", type=int, metavar="N",
                   help="register layouts: show each element's bit slot for N-bit elements")
    p.add_argument("--show", choices=("byte", "bit", "bank"), default="bank",
                   help="shared layouts: what each cell shows (default: bank)")
    p.set_defaults(func=_cmd_layout)
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
