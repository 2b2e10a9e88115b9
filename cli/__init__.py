"""`vmc`: the tilevm command line.

    vmc dtypes               every data type with its range
    vmc dtypes f6e3m2        the full value table of one type (code, bits, value)
    vmc layout "local(2,1).spatial(8,4)" [--bits 4] [--svg out.svg]
                             a register layout's owners per element; a shared layout's
                             byte offsets or banks ("swizzled((8, 64), f16)" --show bank)
    vmc run FILE.py[:KERNEL] [--interpret | --gpu-only] [--set name=value ...] [--seed N]
                             run an example program on random inputs on the GPU and in the
                             reference interpreter (--interpret: the interpreter only),
                             check it against its float64 reference, time the kernel
    vmc analyze FILE.py[:KERNEL] [--set ...] [--arg M=...] [--gpu h100] [--json]
                             the cost model of one launch: bytes per memory level, FLOPs
                             per unit, occupancy, waves, the bound and the prediction
    vmc tune FILE.py[:KERNEL] [--set name=value ...] [--steps N] [--seed S] [-o OUT.ptx]
                             anneal an example kernel's PTX order on the GPU, behind a
                             bit-exact gate; write the fastest order
    vmc tune --permute FILE.ptx [--seed S] [-o OUT.ptx]
                             one legal reordering of a PTX file's instructions
    vmc bench qmm OUT_DIR [options]
                             the quantized matmul benchmark on the GPU (tilevm.bench.qmm;
                             `vmc bench qmm --help` lists its options)

Errors go to stderr as one line and exit with status 2 (bad usage or input) or 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from tilevm import __version__, dtypes
from tilevm.backend import pipeline, ptxas
from tilevm.backend.analysis import target
from tilevm.backend.llvm.codegen import generate
from tilevm.bench import qmm
from tilevm.cli import analyze, run, tune
from tilevm.cli.common import CLIError, load_target, settings_of, write_file, write_output
from tilevm.ir.errors import VMError
from tilevm.ir.printer import format_program
from tilevm.layouts import RegisterLayout, SharedLayout, parse_layout, picture

__all__ = ["main", "build_parser"]


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
        write_file(args.svg, svg)
        print(f"wrote {args.svg}", file=sys.stderr)


def _cmd_compile(args: argparse.Namespace) -> int:
    if args.check and args.emit != "ptx":
        raise CLIError("--check runs ptxas on PTX; it needs --emit ptx")
    settings = settings_of(args.set)
    _, kernel = load_target(args.target)
    try:
        target.target(args.arch)
        program = kernel.specialize(**settings)
        if args.dump_after:
            if args.dump_after not in pipeline.PASS_NAMES:
                raise CLIError(f"no pass named {args.dump_after!r}; passes: "
                               f"{', '.join(pipeline.PASS_NAMES)}")
            pipeline.run_passes(program, args.dump_after,
                                lambda name, p: print(f"// after {name}\n{format_program(p)}",
                                                      end=""), arch=args.arch)
            return 0
        if args.emit == "ir":
            text = format_program(program)
        elif args.emit == "llvm":
            text = str(generate(pipeline.run_passes(program, arch=args.arch)))
        else:
            text = pipeline.compile_program(program, args.arch).ptx
            if args.emit == "sass":  # (ptxas, then nvdisasm: both from a CUDA toolkit)
                text = ptxas.disassemble(ptxas.assemble(text, args.arch))
    except VMError as err:
        raise CLIError(str(err)) from None
    except (target.TargetError, ValueError, ptxas.PTXError, ptxas.PtxasNotFoundError,
            ptxas.CudaToolNotFoundError, ptxas.DisassemblyError) as err:
        raise CLIError(str(err)) from None
    write_output(args.output, text)
    if args.check:
        try:
            report = ptxas.check_ptx(text, args.arch)
        except (ptxas.PTXError, ptxas.PtxasNotFoundError) as err:
            raise CLIError(str(err)) from None
        print(report, file=sys.stderr)
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    benchmarks = {"qmm": qmm.main}
    return benchmarks[args.benchmark](args.options)


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
        "compile", help="compile a kernel to PTX",
        description="Compile a kernel of a Python file to PTX (or print its IR or LLVM IR). "
                    "Compile-time constants are set with --set; errors go to stderr with a "
                    "non-zero status.",
        epilog="examples: vmc compile examples/vector_add.py -o vadd.ptx --arch sm_90 --check\n"
               "          vmc compile examples/vector_add.py --emit ir --set block=256\n"
               "          vmc compile examples/vector_add.py --emit sass --arch sm_90a\n"
               "          vmc compile examples/vector_add.py --dump-after infer_layouts",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="FILE.py[:KERNEL]",
                   help="the file, and the kernel's name if the file defines several")
    p.add_argument("-o", "--output", metavar="OUT", help="write here (default: stdout)")
    p.add_argument("--arch", default="sm_80", metavar="ARCH",
                   help="sm_80, sm_86, sm_89, sm_90 or sm_90a (default sm_80)")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="a compile-time constant (a Python literal or a type name); repeatable")
    p.add_argument("--emit", choices=("ir", "llvm", "ptx", "sass"), default="ptx",
                   help="what to write: the VM IR, the LLVM IR, PTX (default), or the "
                        "machine code ptxas makes of it, as nvdisasm prints it")
    p.add_argument("--dump-after", metavar="PASS",
                   help="print the IR after this pass and stop (passes: verify, infer_layouts)")
    p.add_argument("--check", action="store_true",
                   help="run ptxas on the PTX and report registers, spills, shared memory")
    p.set_defaults(func=_cmd_compile)

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

    run.add_parser(sub)
    analyze.add_parser(sub)
    tune.add_parser(sub)

    p = sub.add_parser(
        "bench", help="run a benchmark on the GPU (JSON, Markdown, plot)",
        description="Run a benchmark of bench/ and write its results to OUT_DIR; the "
                    "arguments after the benchmark's name are its own (vmc bench qmm --help).",
        epilog="examples: vmc bench qmm out --quick\n"
               "          vmc bench qmm out --shapes 8b.qkv --m 1,16 --dtypes int4,int3",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("benchmark", choices=("qmm",),
                   help="qmm: quantized matmul against cuBLAS and gemlite")
    p.add_argument("options", nargs=argparse.REMAINDER, metavar="...",
                   help="OUT_DIR and the benchmark's options")
    p.set_defaults(func=_cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int | None] = args.func
    try:
        status = func(args)
    except CLIError as err:
        print(f"vmc {args.command}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `vmc dtypes | head`
        sys.stderr.close()
        return 0
    return status or 0
