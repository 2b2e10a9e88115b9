"""The rule for a literal constant of a type: the one value it holds, or why it has none.

The verifier, the interpreter and the compiler all read a constant through
`literal_value` (and the compiler its bits through `literal_code`), so a literal means
the same thing in each:

- an integer type holds an integer literal in its range [min, max] exactly; a literal
  outside it, or a float literal, has no value (`DTypeError`): integers never wrap or
  saturate silently in a constant;
- a float type holds the literal rounded as `encode` rounds it: to nearest, ties to even;
  beyond the largest finite value, IEEE-like formats (f16, bf16, f32, the e5m2-like
  low-bit ones) give +-inf and finite-only and FN formats saturate to +-max (an infinite
  literal included); NaN gives the format's NaN, and has no value in a format without one.

The phrases of a `DTypeError` here read after the literal ("300 does not fit int8 ..."),
so each caller can prefix its own context.
"""

from __future__ import annotations

import math
import numbers

from tilevm.dtypes.codec import decode, encode
from tilevm.dtypes.datatype import DataType, DTypeError, parse


def literal_value(value: int | float | bool, dtype: DataType | str) -> int | float:
    """The value a literal `value` of type `dtype` holds: an int for integer types, a
    float for float types (NaN as `math.nan`); a `DTypeError` whose message continues
    "`value` ..." where it holds none."""
    dtype = parse(dtype)
    if isinstance(value, bool):
        value = int(value)
    if not isinstance(value, numbers.Real):
        raise TypeError(f"a literal is an int or a float, got {type(value).__name__}")
    if dtype.is_integer:
        if not isinstance(value, numbers.Integral):
            raise DTypeError(f"is not an integer but has type {dtype}")
        value = int(value)
        if not dtype.min_exact <= value <= dtype.max_exact:
            raise DTypeError(f"does not fit {dtype} ([{dtype.min_exact}, {dtype.max_exact}])")
        return value
    return _rounded_float(value, dtype)


def literal_code(value: int | float | bool, dtype: DataType | str) -> int:
    """The code (the bits, as an unsigned int) of the value a literal holds (see
    `literal_value`); NaN is the format's NaN code (`DataType.nan_code`)."""
    dtype = parse(dtype)
    held = literal_value(value, dtype)
    if dtype.is_integer:
        return held % (1 << dtype.bits)
    return int(encode(held, dtype))


def _rounded_float(value: numbers.Real, dtype: DataType) -> float:
    try:
        x = float(value)
    except OverflowError:  # an int beyond float64: past every format's largest value
        x = math.copysign(math.inf, value)
    if math.isnan(x):
        if not dtype.has_nan:
            raise DTypeError(f"is NaN, and {dtype} has no NaN")
        return math.nan
    return float(decode(encode(x, dtype), dtype))
