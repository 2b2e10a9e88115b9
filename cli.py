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
    vmc bench qmm OUT_DIR [options]
                             the quantized matmul benchmark on the GPU (tilevm.bench.qmm;
                             `vmc bench qmm --help` lists its options)

Errors go to stderr as one line and exit with status 2 (bad usage or input) or 1.
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Sequence

import numpy as np

from tilevm import __version__, dtypes, gpu_run
from tilevm.backend import pipeline, ptxas
from tilevm.backend.analysis import target
from tilevm.backend.cuda.errors import CudaError, NoDriverError
from tilevm.backend.llvm.codegen import generate
from tilevm.bench import qmm
from tilevm.ir.errors import VMError
from tilevm.ir.printer import format_program
from tilevm.layouts import RegisterLayout, SharedLayout, parse_layout, picture
from tilevm.vm.frontend import Kernel


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


# ---- vmc run -----------------------------------------------------------------------------

RUN_DESCRIPTION = """\
Run a kernel of an example program on fresh random inputs and compare its outputs with
the program's float64 reference.

Modes:
  (default)     on the GPU and in the reference interpreter, each on its own copy of the
                same inputs. Both must pass the criterion below; integer outputs must
                also be bitwise equal on the GPU and in the interpreter (float outputs
                may round differently, e.g. another summation order or exp: how many
                elements differ is reported). Then the kernel time: the median of
                --repeat launches, timed with CUDA events (no PyTorch needed), the
                launches queued behind a stream wait so that the host's submission time
                is not counted (the output names the method). Needs a GPU: without one
                it is an error (add --interpret).
  --gpu-only    the same without the interpreter, for problems too large for it.
  --interpret   in the reference interpreter only; no GPU needed.

FILE.py is imported as a module. It defines the kernel(s) (@tv.kernel), and:
  example_inputs(rng, **settings) -> (args, constants)
      fresh random runtime arguments (numpy arrays and scalars, in the kernel's order)
      and the kernel's compile-time constants; --set values are passed as settings
      (problem sizes such as M=33, or constants such as wdtype=int3). If it has a
      parameter named `kernel`, it also receives the kernel being run.
  reference(*args, **constants) -> {argument index: expected values}
      the expected contents of each output argument, computed in float64.
With several kernels in FILE.py, name one: FILE.py:KERNEL.

Pass/fail criterion (f32 accumulation tolerance): an output passes when every element
satisfies
    |got - ref| <= rtol * |ref| + atol * max|ref|
where rtol is the machine epsilon of the output's type (2^-10 for f16, 2^-23 for f32:
twice the unit roundoff of the final rounding to that type) and atol is 2^-16 (the
error of f32 accumulation, relative to the output's largest value), or the module's
ATOL where it sets one (examples/quantized_matmul.py: 2^-9, because it rounds each
dequantized weight to f16 before the dot, as the GPU kernel does). Integer outputs
must match exactly. NaN where the reference is a number fails. The relative error
reported is |got - ref| / max(|ref|, atol * max|ref|).

Exit status: 0 when every output passes, 1 when one fails or the kernel raises an
error while it compiles or runs, 2 for a usage error (bad file, kernel, setting, no GPU).
"""

DEFAULT_ATOL = 2.0 ** -16


def parse_setting(text: str) -> tuple[str, object]:
    """`name=value`: the value as a Python literal (17, 0.5, True, (1, 2), 'x') or a data
    type name (int3, f16)."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name.isidentifier():
        raise CLIError(f"--set takes name=value (name a Python identifier), got {text!r}")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    try:
        return name, dtypes.parse(value)
    except dtypes.DTypeError:
        pass
    raise CLIError(f"--set {name}: {value!r} is neither a Python literal (17, 0.5, True, "
                   "'text') nor a data type name (int3, f16, ...)")


def _load_module(path: str) -> object:
    if not os.path.isfile(path):
        raise CLIError(f"no such file: {path}")
    name = "_vmc_run_" + "".join(c if c.isalnum() else "_" for c in
                                 os.path.splitext(os.path.basename(path))[0])
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CLIError(f"cannot import {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # the user's module: report it, without a traceback
        sys.modules.pop(name, None)
        raise CLIError(f"importing {path} failed: {type(err).__name__}: {err}") from None
    finally:
        if sys.path and sys.path[0] == folder:
            sys.path.pop(0)
    return module


def _find_kernel(module: object, path: str, wanted: str | None):
    found: dict[str, Kernel] = {}
    for attr, value in vars(module).items():
        if isinstance(value, Kernel) and all(value is not k for k in found.values()):
            found[attr] = value
    if not found:
        raise CLIError(f"{path} defines no kernel (a function decorated with @tv.kernel)")
    if wanted is None:
        if len(found) > 1:
            raise CLIError(f"{path} defines {len(found)} kernels ({', '.join(found)}); name "
                           f"one: {path}:{next(iter(found))}")
        return next(iter(found.values()))
    if wanted in found:
        return found[wanted]
    by_name = [k for k in found.values() if k.name == wanted]
    if len(by_name) == 1:
        return by_name[0]
    raise CLIError(f"{path} has no kernel {wanted!r}; its kernels: {', '.join(found)}")


def _protocol(module: object, path: str, name: str, what: str):
    func = getattr(module, name, None)
    if not callable(func):
        raise CLIError(f"{path} defines no {what}; vmc run needs it (see vmc run --help)")
    return func


def _describe_args(kernel, args: Sequence[object]) -> str:
    parts = []
    for param, arg in zip(kernel.signature.params, args):
        if isinstance(arg, np.ndarray):
            parts.append(f"{param.name} {arg.dtype}{list(arg.shape)}")
        else:
            parts.append(f"{param.name}={arg!r}")
    return ", ".join(parts)


def compare(got, expected, atol: float = DEFAULT_ATOL) -> tuple[bool, dict[str, float]]:
    """The pass/fail criterion of `vmc run` (see RUN_DESCRIPTION) for one output array:
    (passed, {"max_abs": ..., "max_rel": ..., "worst": max error / tolerance}). The
    relative error of an element is `|got - ref| / max(|ref|, atol * max|ref|)` (elements
    far smaller than the output's scale are judged against that scale)."""
    got_arr = np.asarray(got)
    ref = np.asarray(expected, dtype=np.float64)
    if got_arr.shape != ref.shape:
        if got_arr.size != ref.size:
            raise CLIError(f"the reference has shape {ref.shape}, the output {got_arr.shape}")
        ref = ref.reshape(got_arr.shape)
    exact = got_arr.dtype.kind in "iub"
    rtol = 0.0 if exact else float(np.finfo(got_arr.dtype).eps)
    values = got_arr.astype(np.float64)
    finite_ref = np.isfinite(ref)
    scale = float(np.abs(ref[finite_ref]).max()) if finite_ref.any() else 0.0
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        err = np.abs(values - ref)
        err = np.where((values == ref) | (np.isnan(values) & np.isnan(ref)), 0.0, err)
        err = np.where(np.isnan(err), np.inf, err)
        tol = rtol * np.abs(np.where(finite_ref, ref, 0.0)) + (0.0 if exact else atol * scale)
        rel = np.where(err == 0, 0.0, err / np.maximum(np.abs(ref), atol * scale))
        worst = np.where(err == 0, 0.0, err / tol)
    stats = {"max_abs": float(err.max(initial=0.0)), "max_rel": float(rel.max(initial=0.0)),
             "worst": float(worst.max(initial=0.0))}
    return bool((err <= tol).all()), stats


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def _split_target(target: str) -> tuple[str, str | None]:
    """`FILE.py[:KERNEL]` -> (path, kernel name or None)."""
    head, sep, tail = target.rpartition(":")
    if sep and tail.isidentifier() and head:
        return head, tail
    return target, None


def _cmd_compile(args: argparse.Namespace) -> int:
    path, wanted = _split_target(args.target)
    settings = dict(parse_setting(item) for item in args.set or ())
    kernel = _find_kernel(_load_module(path), path, wanted)
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
    except VMError as err:
        raise CLIError(str(err)) from None
    except (target.TargetError, ValueError) as err:
        raise CLIError(str(err)) from None
    if args.output and args.output != "-":
        try:
            with open(args.output, "w") as f:
                f.write(text)
        except OSError as err:
            raise CLIError(f"cannot write {args.output}: {err.strerror}") from None
    else:
        print(text, end="")
    if args.check:
        if args.emit != "ptx":
            raise CLIError("--check runs ptxas on PTX; it needs --emit ptx")
        try:
            report = ptxas.check_ptx(text, args.arch)
        except (ptxas.PTXError, ptxas.PtxasNotFoundError) as err:
            raise CLIError(str(err)) from None
        print(report, file=sys.stderr)
    return 0


def _require_gpu(kernel_name: str) -> gpu_run.GpuDevice:
    """The current GPU, or a CLIError that says how to run without one."""
    try:
        device = gpu_run.gpu_device()
    except NoDriverError as err:
        raise CLIError(f"no GPU found ({err}); add --interpret to run {kernel_name} in the "
                       "reference interpreter") from None
    if device.arch not in target.TARGETS:
        raise CLIError(f"the GPU is {device.arch}, which tilevm does not compile for "
                       f"(supported: {', '.join(target.TARGETS)}); add --interpret to run "
                       f"{kernel_name} in the reference interpreter")
    return device


def _check_outputs(names: Sequence[str], outputs: Sequence[object],
                   expected: dict[int, object], atol: float, label: str = "") -> bool:
    """Print one line per output (`compare` against the reference); all passed?"""
    passed = True
    for index, want in sorted(expected.items()):
        ok, stats = compare(outputs[index], want, atol)
        passed &= ok
        print(f"  {names[index]}{label}: max abs err {stats['max_abs']:.3g}, max rel err "
              f"{stats['max_rel']:.3g}, max err/tolerance {stats['worst']:.3g}: "
              f"{'PASS' if ok else 'FAIL'}")
    return passed


def agreement(gpu, interpreted) -> tuple[bool, str]:
    """Whether two results of one output are bitwise equal, and a line that says so or
    how many elements differ (and by how much, for numbers)."""
    a, b = np.ascontiguousarray(gpu), np.ascontiguousarray(interpreted)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False, f"{a.dtype}{list(a.shape)} on the GPU, {b.dtype}{list(b.shape)} " \
                      "in the interpreter"
    bits = np.dtype(f"u{a.dtype.itemsize}")
    differ = a.view(bits) != b.view(bits)
    count = int(differ.sum())
    if not count:
        return True, "bitwise equal"
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a[differ].astype(np.float64) - b[differ].astype(np.float64))
    return False, f"{count} of {a.size} elements differ (max abs diff {diff.max():.3g})"


def _prepare_run(args: argparse.Namespace):
    """`vmc run`'s common part: the module, the kernel, its inputs and constants, the
    specialized program and the reference's expected outputs."""
    path, wanted = _split_target(args.target)
    settings = dict(parse_setting(item) for item in args.set or ())
    module = _load_module(path)
    kernel = _find_kernel(module, path, wanted)
    make_inputs = _protocol(module, path, "example_inputs",
                            "example_inputs(rng, **settings) -> (args, constants)")
    reference = _protocol(module, path, "reference",
                          "reference(*args, **constants) -> {index: expected}")
    device = None if args.interpret else _require_gpu(kernel.name)
    try:
        accepts_kernel = "kernel" in inspect.signature(make_inputs).parameters
    except (TypeError, ValueError):
        accepts_kernel = False
    if accepts_kernel:
        settings.setdefault("kernel", kernel)
    rng = np.random.default_rng(args.seed)
    try:
        result = make_inputs(rng, **settings)
        kernel_args, constants = result
        kernel_args, constants = list(kernel_args), dict(constants)
    except Exception as err:
        raise CLIError(f"example_inputs({', '.join(f'{k}={v}' for k, v in settings.items())})"
                       f" failed: {type(err).__name__}: {err}") from None
    try:
        program = kernel.specialize(**constants)
    except VMError as err:
        shown = ", ".join(f"{k}={v}" for k, v in constants.items()) or "default constants"
        raise CLIError(f"cannot compile {kernel.name} with {shown}:\n{err}") from None
    try:
        expected = reference(*copy.deepcopy(kernel_args), **constants)
    except Exception as err:
        raise CLIError(f"reference() failed: {type(err).__name__}: {err}") from None
    for index in expected:
        if not isinstance(index, int) or not 0 <= index < len(kernel_args):
            raise CLIError(f"reference() returned an entry for argument {index!r}; the kernel "
                           f"takes {len(kernel_args)} arguments")
    atol = float(getattr(module, "ATOL", DEFAULT_ATOL))
    return kernel, device, kernel_args, constants, program, expected, atol


def _interpret(kernel, kernel_args: list, constants: dict) -> bool:
    """Run in the interpreter (in place); False, with the error on stderr, if it raised."""
    try:
        kernel.interpret(*kernel_args, **constants)
    except VMError as err:
        print(f"vmc run: error: {kernel.name} failed in the interpreter:\n{err}",
              file=sys.stderr)
        return False
    return True


def _cmd_run(args: argparse.Namespace) -> int:
    kernel, device, kernel_args, constants, program, expected, atol = _prepare_run(args)
    names = [p.name for p in kernel.signature.params]
    shown = ", ".join(f"{k}={v}" for k, v in constants.items()) or "defaults"
    if device is None:
        print(f"{kernel.name}: interpreter, seed {args.seed}, constants: {shown}")
        print(f"  arguments: {_describe_args(kernel, kernel_args)}")
        if not _interpret(kernel, kernel_args, constants):
            print("FAIL")
            return 1
        passed = _check_outputs(names, kernel_args, expected, atol)
        print("PASS" if passed else "FAIL")
        return 0 if passed else 1

    where = "only" if args.gpu_only else "and interpreter"
    print(f"{kernel.name}: GPU ({device.name}, {device.arch}) {where}, seed {args.seed}, "
          f"constants: {shown}")
    print(f"  arguments: {_describe_args(kernel, kernel_args)}")
    try:
        run = gpu_run.run_on_gpu(program, kernel_args, args.repeat)
    except (VMError, CudaError, ptxas.PTXError, TypeError, ValueError) as err:
        print(f"vmc run: error: {kernel.name} failed on the GPU:\n{type(err).__name__}: {err}",
              file=sys.stderr)
        print("FAIL")
        return 1
    passed = _check_outputs(names, run.outputs, expected, atol, " (GPU)")
    if not args.gpu_only:
        interpreted = copy.deepcopy(kernel_args)
        if not _interpret(kernel, interpreted, constants):
            print("FAIL")
            return 1
        passed &= _check_outputs(names, interpreted, expected, atol, " (interpreter)")
        for index in sorted(expected):
            same, text = agreement(run.outputs[index], interpreted[index])
            # Integers are exact: the GPU must match the interpreter bit for bit. Float
            # results may round differently (summation order, exp), within the tolerance.
            exact = np.asarray(interpreted[index]).dtype.kind in "iub"
            passed &= same or not exact
            verdict = f": {'PASS' if same else 'FAIL'}" if exact else ""
            print(f"  {names[index]} (GPU vs interpreter): {text}{verdict}")
    if run.time is not None:
        print(f"  kernel time: {run.time.median_s * 1e6:.2f} us (median of {run.time.runs} "
              f"launches; {run.time.method})")
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


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
               "          vmc compile examples/vector_add.py --dump-after infer_layouts",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="FILE.py[:KERNEL]",
                   help="the file, and the kernel's name if the file defines several")
    p.add_argument("-o", "--output", metavar="OUT", help="write here (default: stdout)")
    p.add_argument("--arch", default="sm_80", metavar="ARCH",
                   help="sm_80, sm_86, sm_89, sm_90 or sm_90a (default sm_80)")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="a compile-time constant (a Python literal or a type name); repeatable")
    p.add_argument("--emit", choices=("ir", "llvm", "ptx"), default="ptx",
                   help="what to write: the VM IR, the LLVM IR, or PTX (default)")
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

    p = sub.add_parser(
        "run", help="run an example program on the GPU and in the interpreter, check it",
        description=RUN_DESCRIPTION,
        epilog="examples: vmc run examples/vector_add.py\n"
               "          vmc run examples/matmul.py --set M=33 --set K=100 --repeat 200\n"
               "          vmc run examples/matmul.py --gpu-only --set M=4096 --set N=4096 "
               "--set K=4096\n"
               "          vmc run examples/matmul.py --interpret --set M=33 --set K=100\n"
               "          vmc run examples/quantized_matmul.py --interpret --set wdtype=int3 "
               "--set group_size=32\n"
               "          vmc run examples/softmax.py:softmax_f16 --interpret --seed 7",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="FILE.py[:KERNEL]",
                   help="the program, and the kernel to run when it defines several")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--interpret", action="store_true",
                      help="run in the reference interpreter only (no GPU needed)")
    mode.add_argument("--gpu-only", action="store_true",
                      help="run on the GPU only, without the interpreter (large problems)")
    p.add_argument("--repeat", type=_non_negative_int, default=100, metavar="N",
                   help="GPU: time N launches and print the median (default 100; 0: no "
                        "timing)")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="a setting for example_inputs: a problem size or a compile-time "
                        "constant; the value is a Python literal or a data type name "
                        "(repeatable)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.set_defaults(func=_cmd_run)

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


if __name__ == "__main__":
    sys.exit(main())
