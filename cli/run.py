"""`vmc run`: an example program on random inputs, on the GPU and in the reference
interpreter, checked against its float64 reference (RUN_DESCRIPTION)."""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Sequence

import numpy as np

from tilevm import dtypes
from tilevm.backend import gpu_run, ptxas
from tilevm.backend.cuda.errors import CudaError
from tilevm.cli.common import (
    DEFAULT_ATOL,
    CLIError,
    compare,
    describe_args,
    example_problem,
    load_target,
    non_negative_int,
    protocol,
    require_gpu,
    settings_of,
    split_target,
)
from tilevm.ir.errors import VMError
from tilevm.ir.types import PointerType

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
where rtol is the machine epsilon of the output's type (2^-10 for f16, 2^-7 for bf16,
2^-23 for f32: twice the unit roundoff of the final rounding to that type; bf16 and the
8-bit floats, held on the host as their codes, are compared as the values the codes
denote) and atol is 2^-16 (the
error of f32 accumulation, relative to the output's largest value), or the module's
ATOL where it sets one (examples/quantized_matmul.py: 2^-9, because it rounds each
dequantized weight to f16 before the dot, as the GPU kernel does). Integer outputs
must match exactly. NaN where the reference is a number fails. The relative error
reported is |got - ref| / max(|ref|, atol * max|ref|).

Exit status: 0 when every output passes, 1 when one fails or the kernel raises an
error while it compiles or runs, 2 for a usage error (bad file, kernel, setting, no GPU).
"""

def _check_outputs(params: Sequence[object], outputs: Sequence[object],
                   expected: dict[int, object], atol: float, label: str = "") -> bool:
    """Print one line per output (`compare` against the reference); all passed?"""
    passed = True
    names = [p.name for p in params]
    for index, want in sorted(expected.items()):
        ok, stats = compare(outputs[index], want, atol, _element_type(params[index]))
        passed &= ok
        print(f"  {names[index]}{label}: max abs err {stats['max_abs']:.3g}, max rel err "
              f"{stats['max_rel']:.3g}, max err/tolerance {stats['worst']:.3g}: "
              f"{'PASS' if ok else 'FAIL'}")
    return passed


def _element_type(param: object) -> dtypes.DataType | None:
    """The element type of a pointer parameter (None for a scalar)."""
    return param.type.dtype if isinstance(param.type, PointerType) else None


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
    path, _ = split_target(args.target)
    module, kernel = load_target(args.target)
    reference = protocol(module, path, "reference",
                          "reference(*args, **constants) -> {index: expected}")
    device = None if args.interpret else require_gpu(
        f"add --interpret to run {kernel.name} in the reference interpreter")
    kernel_args, constants, program = example_problem(
        module, kernel, path, settings_of(args.set), np.random.default_rng(args.seed))
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


def cmd_run(args: argparse.Namespace) -> int:
    kernel, device, kernel_args, constants, program, expected, atol = _prepare_run(args)
    names = [p.name for p in kernel.signature.params]
    shown = ", ".join(f"{k}={v}" for k, v in constants.items()) or "defaults"
    if device is None:
        print(f"{kernel.name}: interpreter, seed {args.seed}, constants: {shown}")
        print(f"  arguments: {describe_args(kernel, kernel_args)}")
        if not _interpret(kernel, kernel_args, constants):
            print("FAIL")
            return 1
        passed = _check_outputs(kernel.signature.params, kernel_args, expected, atol)
        print("PASS" if passed else "FAIL")
        return 0 if passed else 1

    where = "only" if args.gpu_only else "and interpreter"
    print(f"{kernel.name}: GPU ({device.name}, {device.arch}) {where}, seed {args.seed}, "
          f"constants: {shown}")
    print(f"  arguments: {describe_args(kernel, kernel_args)}")
    try:
        run = gpu_run.run_on_gpu(program, kernel_args, args.repeat)
    except (VMError, CudaError, ptxas.PTXError, TypeError, ValueError) as err:
        print(f"vmc run: error: {kernel.name} failed on the GPU:\n{type(err).__name__}: {err}",
              file=sys.stderr)
        print("FAIL")
        return 1
    passed = _check_outputs(kernel.signature.params, run.outputs, expected, atol, " (GPU)")
    if not args.gpu_only:
        interpreted = copy.deepcopy(kernel_args)
        if not _interpret(kernel, interpreted, constants):
            print("FAIL")
            return 1
        passed &= _check_outputs(kernel.signature.params, interpreted, expected, atol,
                                 " (interpreter)")
        for index in sorted(expected):
            same, text = agreement(run.outputs[index], interpreted[index])
            # Integers are exact: the GPU must match the interpreter bit for bit. Float
            # results may round differently (summation order, exp), within the tolerance.
            element = _element_type(kernel.signature.params[index])
            exact = np.asarray(interpreted[index]).dtype.kind in "iub" and not (
                element is not None and element.is_float)
            passed &= same or not exact
            verdict = f": {'PASS' if same else 'FAIL'}" if exact else ""
            print(f"  {names[index]} (GPU vs interpreter): {text}{verdict}")
    if run.time is not None:
        print(f"  kernel time: {run.time.median_s * 1e6:.2f} us (median of {run.time.runs} "
              f"launches; {run.time.method})")
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The `run` command's arguments."""
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
    p.add_argument("--repeat", type=non_negative_int, default=100, metavar="N",
                   help="GPU: time N launches and print the median (default 100; 0: no "
                        "timing)")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="a setting for example_inputs: a problem size or a compile-time "
                        "constant; the value is a Python literal or a data type name "
                        "(repeatable)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.set_defaults(func=cmd_run)
