"""Binding launch arguments to a kernel's `Signature` and checking them (no GPU needed).

Launch arguments, in the order of the program's parameters:
- a pointer parameter takes a device array: a PyTorch tensor (`data_ptr()`), a
  `DeviceArray`, or any object with `__cuda_array_interface__` (CuPy, Numba) or DLPack
  (`__dlpack__` / `__dlpack_device__`, e.g. JAX). It must live on the GPU, be
  contiguous, hold elements of the pointer's dtype (f16: float16; bf16: bfloat16 or
  16-bit integer codes; 8-bit floats: torch's float8 types or 8-bit integer codes;
  sub-byte types: uint8/int8 *bytes* of densely packed values, `tilevm.dtypes.pack`;
  a `DeviceArray` of the very dtype always fits), be aligned as the compiled code
  assumes (`ParamSpec.align`: 16 bytes from `signature_from_program` by default, at
  least the element size), be writable if the kernel writes it, and be large enough
  for every global view the program takes of it whose extent depends only on scalar
  arguments;
- the scalar arguments must satisfy every `assume` at the top level of the program
  body whose condition depends only on scalar parameters (`tv.assume(N % 8 == 0)`):
  the compiled code relies on them;
- a scalar parameter takes a Python or numpy number (an int that fits an integer
  type; an int or float for a float type, whose magnitude is at most the type's
  largest finite value).
All of this is checked by `validate_args` before anything is launched; violations raise
`ArgumentTypeError` (also a `TypeError`) or `ArgumentValueError` (also a `ValueError`),
both `VMError`s that name the parameter. `grid_of` evaluates the signature's grid over
the bound scalar arguments.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilevm.backend.analysis.signature import ParamSpec, Signature
from tilevm.backend.cuda.buffers import CODE_NAMES, BufferInfo, describe_buffer, is_torch_tensor
from tilevm.backend.cuda.errors import ArgumentTypeError, ArgumentValueError
from tilevm.dtypes import DataType
from tilevm.ir.errors import SourceLoc, VMError
from tilevm.ir.evaluate import evaluate
from tilevm.ir.expr import Expr, Var, free_vars
from tilevm.ir.stmt import cluster_grid_problem

__all__ = ["BoundPointer", "BoundScalar", "validate_args", "grid_of", "grid_for",
           "accepted_codes", "int_range", "scalar_value", "UnknownValue"]


@dataclass(frozen=True)
class BoundPointer:
    """A pointer argument bound to its parameter: the buffer it describes."""

    param: ParamSpec
    buffer: BufferInfo

    @property
    def address(self) -> int:
        return self.buffer.address


@dataclass(frozen=True)
class BoundScalar:
    """A scalar argument bound to its parameter: its value (an int, or a float)."""

    param: ParamSpec
    value: int | float


def accepted_codes(dtype: DataType) -> tuple[str, ...]:
    """The element-type codes a pointer to `dtype` accepts (see the module docstring)."""
    if dtype.bits < 8:
        return ("u1", "i1")
    if dtype.name == "f32":
        return ("f4",)
    if dtype.name == "f16":
        return ("f2",)
    if dtype.name == "bf16":
        return ("bf16", "u2", "i2")
    if dtype.is_float:  # 8-bit float formats: their own torch type, or 8-bit codes
        own = ("f8e4m3",) if dtype.name == "f8e4m3" else ("f8e5m2",) if dtype.name == "f8e5m2" \
            else ()
        return (*own, "u1", "i1")
    return (f"{'i' if dtype.is_signed else 'u'}{dtype.bits // 8}",)


def _expected_text(dtype: DataType) -> str:
    codes = accepted_codes(dtype)
    names = " or ".join(CODE_NAMES.get(c, c) for c in codes)
    if dtype.bits < 8:
        return (f"{names} bytes of densely packed {dtype} values "
                f"(tilevm.dtypes.pack; {dtype.bits} bits each)")
    if dtype.name == "bf16":
        return "bfloat16 (or uint16/int16 bf16 codes)"
    if dtype.is_float and dtype.bits == 8:
        return f"{names} ({dtype} codes)"
    return names


def _what(i: int, p: ParamSpec, sig: Signature) -> str:
    return f"kernel {sig.name}: argument {i} ({p})"


def validate_args(signature: Signature, args: Sequence[Any],
                  checked: set[tuple[Any, ...]] | None = None
                  ) -> tuple[BoundPointer | BoundScalar, ...]:
    """Check `args` against `signature` (no GPU needed) and bind them; raises
    `ArgumentTypeError` / `ArgumentValueError` naming the first bad argument.

    The checks that depend only on the scalar arguments and the buffers' sizes (the
    assumptions, the views fitting their buffers) are skipped when `checked` holds that
    combination already, and recorded there when they pass: a kernel called again and
    again with the same sizes (every decode step) pays only for binding its arguments."""
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise ArgumentTypeError(f"kernel {signature.name}: arguments must be a list or tuple, "
                                f"got {type(args).__name__}")
    params = signature.params
    if len(args) != len(params):
        raise ArgumentTypeError(
            f"kernel {signature.name} takes {len(params)} argument(s) "
            f"({', '.join(str(p) for p in params)}), got {len(args)}")
    bound: list[BoundPointer | BoundScalar] = []
    for i, (p, a) in enumerate(zip(params, args)):
        if p.is_pointer:
            bound.append(_bind_pointer(i, p, a, signature))
        else:
            bound.append(_bind_scalar(i, p, a, signature))
    key = tuple(b.value if isinstance(b, BoundScalar) else b.buffer.nbytes for b in bound)
    if checked is None or key not in checked:
        _check_assumptions(signature, bound)
        _check_sizes(signature, bound)
        if checked is not None:
            checked.add(key)
    return tuple(bound)


def _check_assumptions(sig: Signature, bound: Sequence[BoundPointer | BoundScalar]) -> None:
    """Every top-level `assume` over scalar arguments holds (the code relies on it)."""
    env = {b.param.name: b.value for b in bound if isinstance(b, BoundScalar)}
    for a in sig.assumptions:
        try:
            holds = scalar_value(a.cond, env)
        except UnknownValue:
            continue  # float arithmetic etc.: left to the kernel's own semantics
        if not holds:
            names = sorted({v.name for v in free_vars(a.cond)})
            values = ", ".join(f"{n} = {env[n]}" for n in names if n in env)
            raise ArgumentValueError(f"kernel {sig.name} assumes {a.text}, but "
                                     f"{values or 'it does not hold for these arguments'}",
                                     loc=SourceLoc.parse(a.where))


def _bind_pointer(i: int, p: ParamSpec, a: Any, sig: Signature) -> BoundPointer:
    # The messages are built only on the error paths: binding runs at every launch.
    def what() -> str:
        return _what(i, p, sig)

    def expected() -> str:
        return _expected_text(p.dtype)

    if isinstance(a, (bool, int, float)) or a is None:
        raise ArgumentTypeError(f"{what()} must be a CUDA array of {expected()}, got "
                                f"{type(a).__name__} {a!r}")
    info = describe_buffer(a)
    if info is None:
        raise ArgumentTypeError(
            f"{what()} must be a CUDA array of {expected()} (a torch tensor, a DeviceArray, or an "
            f"object with __cuda_array_interface__ or __dlpack__), got {type(a).__name__}")
    if info.device not in ("cuda", "cuda_managed"):
        raise ArgumentTypeError(f"{what()} is on the {info.device} device ({info.dtype_name}); "
                                f"it must be a CUDA array (e.g. tensor.cuda())")
    fits = (info.tilevm_dtype == p.dtype) or info.dtype in accepted_codes(p.dtype)
    if not fits:
        raise ArgumentTypeError(f"{what()} must hold {expected()}, got {info.dtype_name}")
    if not info.contiguous:
        raise ArgumentValueError(f"{what()} must be contiguous (e.g. tensor.contiguous())")
    align = p.required_align
    if info.address % align:
        raise ArgumentValueError(
            f"{what()}: address {info.address:#x} is not {align}-byte aligned, as the compiled "
            f"kernel assumes (it is {info.address % align} bytes past a multiple of {align}; "
            f"a slice that starts mid-buffer does this: pass a fresh or .clone()d array)")
    if p.readonly is False and info.readonly:
        raise ArgumentValueError(f"{what()}: the kernel writes through this pointer but the "
                                 f"array is read-only")
    return BoundPointer(p, info)


def _bind_scalar(i: int, p: ParamSpec, a: Any, sig: Signature) -> BoundScalar:
    def what() -> str:
        return _what(i, p, sig)

    dtype = p.dtype
    if isinstance(a, np.generic) or (isinstance(a, np.ndarray) and a.ndim == 0):
        a = a.item()
    if _looks_like_array(a):
        raise ArgumentTypeError(f"{what()} is a scalar; got an array ({type(a).__name__})")
    if dtype.is_float:
        if isinstance(a, bool) or not isinstance(a, (int, float)):
            raise ArgumentTypeError(f"{what()} must be a number, got {type(a).__name__} {a!r}")
        v = float(a)
        if math.isnan(v) and not dtype.has_nan:
            raise ArgumentValueError(f"{what()}: {dtype} has no NaN")
        if math.isinf(v) and not dtype.has_inf:
            raise ArgumentValueError(f"{what()}: {dtype} has no infinity")
        if math.isfinite(v) and abs(v) > dtype.max:
            raise ArgumentValueError(f"{what()}: {a!r} is out of range for {dtype} "
                                     f"(largest finite value {dtype.max!r})")
        return BoundScalar(p, v)
    if isinstance(a, bool):
        a = int(a)
    if not isinstance(a, int):
        raise ArgumentTypeError(f"{what()} must be an int, got {type(a).__name__} {a!r}")
    lo, hi = int_range(dtype)
    if not lo <= a <= hi:
        raise ArgumentValueError(f"{what()}: {a} is out of range for {dtype} [{lo}, {hi}]")
    return BoundScalar(p, a)


@functools.cache
def int_range(dtype: DataType) -> tuple[int, int]:
    return int(dtype.min_exact), int(dtype.max_exact)


def _looks_like_array(a: Any) -> bool:
    """Whether `a` is an array (arrays passed for scalars are rejected)."""
    return (is_torch_tensor(a) or hasattr(a, "__cuda_array_interface__")
            or hasattr(a, "__dlpack__") or isinstance(a, np.ndarray)
            or type(a).__name__ == "DeviceArray")


def _check_sizes(sig: Signature, bound: Sequence[BoundPointer | BoundScalar]) -> None:
    env = {b.param.name: b.value for b in bound if isinstance(b, BoundScalar)}
    pointers = {b.param.name: (i, b) for i, b in enumerate(bound)
                if isinstance(b, BoundPointer)}
    for view in sig.views:
        if view.param not in pointers:
            continue
        i, b = pointers[view.param]
        try:
            offset = scalar_value(view.offset, env)
            shape = [scalar_value(s, env) for s in view.shape]
            strides = [scalar_value(s, env) for s in view.strides]
        except UnknownValue:
            continue
        if any(n <= 0 for n in shape):
            continue  # an empty view touches nothing
        lo = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
        hi = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
        bits = view.dtype.bits
        have = b.buffer.nbytes * 8 // bits  # whole elements of the view's dtype
        if lo < 0 or hi >= have:
            dims = ", ".join(str(n) for n in shape)
            need = -(-(hi + 1) * bits // 8)
            raise ArgumentValueError(
                f"{_what(i, b.param, sig)} is too small for these sizes: the kernel views it "
                f"as {view.dtype}[{dims}] reaching element {hi if lo >= 0 else lo} "
                f"({need} bytes), but the array has {b.buffer.nbytes} bytes ({have} "
                f"{view.dtype} elements)")


# The most blocks a launch may have along each grid dimension (CUDA's limits, sm_80 on).
MAX_GRID = (2**31 - 1, 65535, 65535)


def grid_for(signature: Signature, args: Sequence[Any]) -> tuple[int, int, int]:
    """The launch grid for these arguments (validated first)."""
    return grid_of(signature, validate_args(signature, args))


def grid_of(signature: Signature, bound: Sequence[BoundPointer | BoundScalar]
            ) -> tuple[int, int, int]:
    """The launch grid for validated arguments (`validate_args`); an error points at the
    program's `tv.grid` line."""
    if not signature.grid:
        raise VMError(f"kernel {signature.name}: the signature has no grid; pass one")
    loc = SourceLoc.parse(signature.grid_where)
    env = {p.name: b.value for p, b in zip(signature.params, bound)
           if isinstance(b, BoundScalar)}
    dims = []
    for axis, e in enumerate(signature.grid):
        try:
            n = scalar_value(e, env)
        except UnknownValue as exc:
            raise VMError(f"kernel {signature.name}: grid dimension {axis} ({e}) cannot be "
                          f"computed from the arguments ({exc})", loc=loc) from None
        if not 0 <= n <= MAX_GRID[axis]:
            raise ArgumentValueError(f"kernel {signature.name}: grid dimension {axis} ({e}) "
                                     f"is {n} for these arguments (0 to {MAX_GRID[axis]})",
                                     loc=loc)
        dims.append(n)
    problem = cluster_grid_problem(signature.cluster, signature.grid[0], dims[0])
    if problem:
        raise ArgumentValueError(f"kernel {signature.name} {problem}", loc=loc)
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


class UnknownValue(Exception):
    """A scalar expression whose value the scalar arguments alone do not give."""


def scalar_value(e: Expr, env: Mapping[str, int | float]) -> int | float:
    """A scalar expression's value over the scalar arguments (ir/evaluate.py, the
    interpreter's semantics); `UnknownValue` if it needs anything else."""

    def lookup(var: Var) -> int | float:
        if var.name not in env:
            raise UnknownValue(f"{var.name} is not a scalar argument")
        return env[var.name]

    try:
        return evaluate(e, lookup)
    except VMError as err:  # block_idx, a zero divisor, ...: not decidable before launch
        raise UnknownValue(err.message) from None
