"""The value of a scalar expression: the semantics of ir/expr.py, in one place.

The reference interpreter evaluates every scalar expression with `evaluate`; the
runtime uses it too, before a launch, for the grid, the sizes of global views and the
`assume` conditions over kernel arguments. Rules:

- integer arithmetic wraps to the expression's type (two's complement); `//` and `%`
  are floor division and modulo, `cdiv` is the ceiling of the quotient; a zero divisor
  is a `VMError`; `/` on integers is a `VMError` (write `//`);
- shift amounts are unsigned, as in PTX (a negative amount counts as huge);
- float arithmetic is done in float64 and rounded once to the expression's type;
- comparisons and `and`/`or`/`not` give 0 or 1;
- a conversion (`ScalarCast`, `Select` into a wider type, a value into a `let`) rounds
  to nearest even, saturating into integer types (`convert_scalar`);
- a constant holds the value `dtypes.constants.literal_value` gives it (an integer
  literal outside its type's range, or a NaN of a type without one, is a `VMError`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from tilevm.dtypes import DataType, DTypeError, decode, encode
from tilevm.dtypes.constants import literal_value
from tilevm.ir.errors import VMError
from tilevm.ir.expr import Binary, BlockIndex, Const, Expr, ScalarCast, Select, Unary, Var

Scalar = int | float


def wrap_int(v: int, dtype: DataType) -> int:
    """A Python int reduced modulo 2**bits into `dtype`'s range."""
    b = dtype.bits
    v %= 1 << b
    if dtype.is_signed and v >= 1 << (b - 1):
        v -= 1 << b
    return v


def round_float_scalar(x: float, dtype: DataType) -> float:
    """A Python float rounded to the float `dtype` (RNE; IEEE overflow or saturation as
    `dtypes.encode` does)."""
    if dtype.bits == 32:
        with np.errstate(over="ignore", invalid="ignore"):
            return float(np.float32(x))
    if math.isnan(x):
        if not dtype.has_nan:
            raise VMError(f"a NaN cannot be a {dtype} value")
        return math.nan
    return float(decode(encode(x, dtype), dtype))


def convert_scalar(v: Scalar | bool, dtype: DataType) -> Scalar:
    """The conversion of a scalar to `dtype` (RNE; integers saturate)."""
    if dtype.is_float:
        return round_float_scalar(float(v), dtype)
    if isinstance(v, float):
        if math.isnan(v):
            raise VMError(f"cannot convert NaN to {dtype}")
        if math.isinf(v):
            v = math.copysign(1e300, v)
        v = round(v)  # Python's round() is half to even
    lo, hi = int(dtype.min_exact), int(dtype.max_exact)
    return min(max(int(v), lo), hi)


_COMPARE = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b,
            "!=": lambda a, b: a != b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
_FLOAT_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide,
              "//": np.floor_divide, "%": np.mod, "min": np.minimum, "max": np.maximum,
              "cdiv": lambda x, y: np.ceil(x / y)}
_INT_OPS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
            "min": min, "max": max, "&": lambda x, y: x & y, "|": lambda x, y: x | y,
            "^": lambda x, y: x ^ y}


def scalar_binary(op: str, a: Scalar, b: Scalar, out: DataType) -> Scalar:
    """`a op b` of a scalar expression whose type is `out`."""
    if op in _COMPARE:
        return int(_COMPARE[op](a, b))
    if op == "and":
        return int(bool(a) and bool(b))
    if op == "or":
        return int(bool(a) or bool(b))
    if out.is_float:
        if op not in _FLOAT_OPS:
            raise VMError(f"operator {op!r} needs integer operands, got a {out} value")
        with np.errstate(all="ignore"):
            r = _FLOAT_OPS[op](np.float64(a), np.float64(b))
        return round_float_scalar(float(r), out)
    x, y = int(a), int(b)
    if op == "/":
        raise VMError("'/' on integers is not defined; write '//' (floor division)")
    if op in ("//", "%", "cdiv"):
        if y == 0:
            raise VMError(f"integer division by zero in {x} {op} {y}")
        r = x // y if op == "//" else x % y if op == "%" else -(-x // y)
    elif op in ("<<", ">>"):
        # the amount is unsigned (as in PTX): a negative one is huge, like >= the width
        y = 128 if y < 0 else min(y, 128)
        r = (x << y) if op == "<<" else x >> y
    elif op in _INT_OPS:
        r = _INT_OPS[op](x, y)
    else:
        raise VMError(f"unknown binary operator {op!r}")
    return wrap_int(r, out)


def scalar_unary(op: str, a: Scalar, out: DataType) -> Scalar:
    if op == "not":
        return int(not a)
    if op == "-":
        return round_float_scalar(-float(a), out) if out.is_float else wrap_int(-int(a), out)
    if op == "~":
        if out.is_float:
            raise VMError(f"'~' needs an integer operand, got a {out} value")
        return wrap_int(~int(a), out)
    raise VMError(f"unknown unary operator {op!r}")


def evaluate(e: Expr | Scalar | bool, lookup: Callable[[Var], Scalar],
             block: tuple[int, int, int] | None = None) -> Scalar:
    """The value of `e`; variables come from `lookup`, `block_idx` from `block` (a
    `VMError` outside a block)."""
    if isinstance(e, bool):
        return int(e)
    if isinstance(e, (int, float)):
        return e
    if isinstance(e, Const):  # the one rule for constants (dtypes/constants.py)
        try:
            return literal_value(e.value, e.dtype)
        except DTypeError as err:
            raise VMError(f"constant {e.value!r} {err}") from None
    if isinstance(e, Var):
        return lookup(e)
    if isinstance(e, BlockIndex):
        if not 0 <= e.axis <= 2:
            raise VMError(f"block index axis {e.axis} is not 0, 1 or 2")
        if block is None:
            raise VMError(f"{e} is not defined outside the blocks (in the grid)")
        return block[e.axis]
    if isinstance(e, Binary):
        return scalar_binary(e.op, evaluate(e.lhs, lookup, block),
                             evaluate(e.rhs, lookup, block), e.dtype)
    if isinstance(e, Unary):
        return scalar_unary(e.op, evaluate(e.operand, lookup, block), e.dtype)
    if isinstance(e, Select):
        chosen = e.if_true if evaluate(e.cond, lookup, block) else e.if_false
        return convert_scalar(evaluate(chosen, lookup, block), e.dtype)
    if isinstance(e, ScalarCast):
        return convert_scalar(evaluate(e.operand, lookup, block), e.dtype)
    raise VMError(f"unknown scalar expression {e!r}")
