"""What the `vmc` commands share: the user's error, `--set` values, loading a kernel from
a Python file, an example file's random problem, and `vmc run`'s pass/fail criterion."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import inspect
import os
import sys
from collections.abc import Sequence

import numpy as np

from tilevm import dtypes
from tilevm.backend import gpu_run
from tilevm.backend.analysis.target import TARGETS
from tilevm.backend.cuda.errors import NoDriverError
from tilevm.ir.errors import VMError
from tilevm.ir.stmt import Program
from tilevm.vm.frontend import Kernel


class CLIError(Exception):
    """A problem with what the user asked for; printed without a traceback."""


DEFAULT_ATOL = 2.0 ** -16


def parse_setting(text: str, flag: str = "--set") -> tuple[str, object]:
    """`name=value` given to option `flag`: the value as a Python literal (17, 0.5, True,
    (1, 2), 'x') or a data type name (int3, f16)."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name.isidentifier():
        raise CLIError(f"{flag} takes name=value (name a Python identifier), got {text!r}")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    try:
        return name, dtypes.parse(value)
    except dtypes.DTypeError:
        pass
    raise CLIError(f"{flag} {name}: {value!r} is neither a Python literal (17, 0.5, True, "
                   "'text') nor a data type name (int3, f16, ...)")


def load_module(path: str) -> object:
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


def find_kernel(module: object, path: str, wanted: str | None):
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


def protocol(module: object, path: str, name: str, what: str):
    func = getattr(module, name, None)
    if not callable(func):
        raise CLIError(f"{path} defines no {what}; vmc run needs it (see vmc run --help)")
    return func


def describe_args(kernel, args: Sequence[object]) -> str:
    parts = []
    for param, arg in zip(kernel.signature.params, args):
        if isinstance(arg, np.ndarray):
            parts.append(f"{param.name} {arg.dtype}{list(arg.shape)}")
        else:
            parts.append(f"{param.name}={arg!r}")
    return ", ".join(parts)


def compare(got, expected, atol: float = DEFAULT_ATOL,
            dtype: dtypes.DataType | None = None) -> tuple[bool, dict[str, float]]:
    """The pass/fail criterion of `vmc run` (see RUN_DESCRIPTION) for one output array:
    (passed, {"max_abs": ..., "max_rel": ..., "worst": max error / tolerance}). The
    relative error of an element is `|got - ref| / max(|ref|, atol * max|ref|)` (elements
    far smaller than the output's scale are judged against that scale). `dtype`, the
    output's element type, decodes a float type held on the host as its codes (bf16 as
    uint16, the 8-bit floats as uint8), judged with that type's epsilon."""
    if dtype is not None and dtype.is_float and dtype.bits >= 8 and \
            np.asarray(got).dtype.kind in "ui":
        values = dtypes.decode(np.asarray(got), dtype)
        return _compare(values, expected, atol, 2.0 ** -dtype.mantissa_bits)
    got_arr = np.asarray(got)
    exact = got_arr.dtype.kind in "iub"
    return _compare(got_arr, expected, atol, 0.0 if exact else float(
        np.finfo(got_arr.dtype).eps), exact)


def _compare(got_arr: np.ndarray, expected, atol: float, rtol: float, exact: bool = False
             ) -> tuple[bool, dict[str, float]]:
    ref = np.asarray(expected, dtype=np.float64)
    if got_arr.shape != ref.shape:
        if got_arr.size != ref.size:
            raise CLIError(f"the reference has shape {ref.shape}, the output {got_arr.shape}")
        ref = ref.reshape(got_arr.shape)
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


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def require_gpu(otherwise: str) -> gpu_run.GpuDevice:
    """The current GPU, or a CLIError that says there is none (or one tilevm does not
    compile for) and, in `otherwise`, what to do instead."""
    try:
        device = gpu_run.gpu_device()
    except NoDriverError as err:
        raise CLIError(f"no GPU found ({err}); {otherwise}") from None
    if device.arch not in TARGETS:
        raise CLIError(f"the GPU is {device.arch}, which tilevm does not compile for "
                       f"(supported: {', '.join(TARGETS)}); {otherwise}")
    return device


def write_file(path: str, text: str) -> None:
    """`text` into the file `path`; one that cannot be written is a CLIError."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as err:
        raise CLIError(f"cannot write {path}: {err.strerror}") from None


def write_output(path: str | None, text: str) -> None:
    """`text` into the file `path` (`-o`), or to standard output for None or "-"."""
    if not path or path == "-":
        sys.stdout.write(text)
    else:
        write_file(path, text)


def split_target(target: str) -> tuple[str, str | None]:
    """`FILE.py[:KERNEL]` -> (path, kernel name or None)."""
    head, sep, tail = target.rpartition(":")
    if sep and tail.isidentifier() and head:
        return head, tail
    return target, None


def load_target(target: str) -> tuple[object, Kernel]:
    """`FILE.py[:KERNEL]`: the imported module and the kernel it names (or its only one)."""
    path, wanted = split_target(target)
    module = load_module(path)
    return module, find_kernel(module, path, wanted)


def settings_of(items: Sequence[str] | None) -> dict[str, object]:
    """`--set name=value ...` as a dict (`parse_setting`)."""
    return dict(parse_setting(item) for item in items or ())


def example_problem(module: object, kernel: Kernel, path: str, settings: dict[str, object],
                    rng: np.random.Generator) -> tuple[list[object], dict[str, object], Program]:
    """A random problem of an example file (its `example_inputs(rng, **settings)`, given
    the kernel too where it takes one): (arguments, constants, the specialized program),
    or a CLIError naming what failed."""
    make_inputs = protocol(module, path, "example_inputs",
                           "example_inputs(rng, **settings) -> (args, constants)")
    settings = dict(settings)
    try:
        accepts_kernel = "kernel" in inspect.signature(make_inputs).parameters
    except (TypeError, ValueError):
        accepts_kernel = False
    if accepts_kernel:
        settings.setdefault("kernel", kernel)
    try:
        kernel_args, constants = make_inputs(rng, **settings)
        kernel_args, constants = list(kernel_args), dict(constants)
    except Exception as err:
        raise CLIError(f"example_inputs({', '.join(f'{k}={v}' for k, v in settings.items())})"
                       f" failed: {type(err).__name__}: {err}") from None
    try:
        program = kernel.specialize(**constants)
    except VMError as err:
        shown = ", ".join(f"{k}={v}" for k, v in constants.items()) or "default constants"
        raise CLIError(f"cannot compile {kernel.name} with {shown}:\n{err}") from None
    return kernel_args, constants, program
