"""Value semantics of the reference interpreter (helpers of its `vm/interp_exec_*`
semantics).

Register tiles are float64 numpy arrays of *values*, each exactly representable in the
tile's dtype (every dtype of at most 32 bits fits float64 exactly). Every operation
computes in float64 (or exactly, in int64, for integer arithmetic) and rounds once to
its output dtype:

- to a float: round to nearest even; finite-only formats saturate, IEEE-like ones
  overflow to inf (`dtypes.encode`); NaN into a format without NaN is a `VMError`;
- to an integer, by a *conversion* (cast, load/store into another dtype, a float
  result): round half to even, then saturate (`dtypes.encode`);
- to an integer, by integer *arithmetic* (elementwise ops whose operands and result
  are integers, integer scalar expressions): two's-complement wraparound.

Scalars (kernel arguments, loop variables, `let`s) are Python ints and floats.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tilevm.dtypes import DataType, DTypeError, decode, encode, host_dtype, pack, parse, unpack
from tilevm.ir.errors import VMError
from tilevm.ir.evaluate import (  # noqa: F401  (re-exported for the interpreter)
    convert_scalar,
    round_float_scalar,
    scalar_binary,
    scalar_unary,
    wrap_int,
)

F32 = parse("f32")

# ---- rounding and wrapping ---------------------------------------------------------------


def check_register_dtype(dtype: DataType, what: str) -> None:
    """Register tiles hold dtypes of at most 32 bits (their values fit float64 exactly)."""
    if dtype.bits > 32:
        raise VMError(f"{what}: tiles of {dtype} are not supported by the interpreter "
                      "(register values must be exact in float64; use at most 32 bits)")


def round_to(x: np.ndarray | float, dtype: DataType) -> np.ndarray:
    """`x` (float64) rounded to the nearest value of `dtype`, as float64 (the conversion
    rule: RNE, saturation where `dtypes.encode` saturates; a NaN keeps its code if it
    carries one of `dtype`, see `decode_codes`)."""
    arr = np.asarray(x, dtype=np.float64)
    if dtype == F32 and not np.isnan(arr).any():
        # the C cast double -> float is RNE with IEEE overflow: the same as encode
        with np.errstate(over="ignore", invalid="ignore"):
            return arr.astype(np.float32).astype(np.float64)
    return decode_codes(to_codes(arr, dtype), dtype)


# NaN codes ride in the payload of float64 NaNs, so that moving data (loads, stores,
# views, copies, where, assign) keeps every bit, as the hardware does. Payload layout
# (below the quiet bit 51): bits 50..43 a marker, 42..33 the dtype, 32..0 the code
# without its sign bit; the code's sign is the float64's sign (so a NaN's sign bit means
# the same in both). Arithmetic makes NaNs without the marker: they encode to the
# format's canonical NaN (`DataType.nan_code`).
_NAN_BASE = 0x7FF8_0000_0000_0000
_NAN_MARK = 0xA5
_LOW33 = (1 << 33) - 1


def _nan_id(dtype: DataType) -> int:
    return dtype.bits * 16 + dtype.exponent_bits


def decode_codes(codes: np.ndarray, dtype: DataType) -> np.ndarray:
    """`dtypes.decode`, but each NaN carries its code (see above)."""
    codes = np.asarray(codes)
    values = decode(codes, dtype)
    if dtype.has_nan:
        nan = np.isnan(values)
        if nan.any():
            c = codes[nan].astype(np.uint64)
            top = dtype.bits - 1
            sign = (c >> np.uint64(top)) & np.uint64(1)
            rest = c & np.uint64((1 << top) - 1)
            word = (np.uint64(_NAN_BASE | _NAN_MARK << 43 | _nan_id(dtype) << 33) | rest
                    | (sign << np.uint64(63)))
            values[nan] = word.view(np.float64)
    return values


def to_codes(values: np.ndarray, dtype: DataType) -> np.ndarray:
    """`dtypes.encode`, but a NaN that carries a code of `dtype` gets that code back; its
    `DTypeError` (NaN into a format without NaN) is a `VMError`."""
    values = np.asarray(values, dtype=np.float64)
    try:
        codes = encode(values, dtype)
    except DTypeError as exc:
        raise VMError(f"cannot convert to {dtype}: {exc}") from None
    if dtype.has_nan:
        nan = np.isnan(values)
        if nan.any():
            word = np.ascontiguousarray(values[nan]).view(np.uint64)
            top = dtype.bits - 1
            tagged = ((word >> np.uint64(33)) & np.uint64((1 << 30) - 1)) == np.uint64(
                (_NAN_BASE >> 33) & ((1 << 30) - 1) | _NAN_MARK << 10 | _nan_id(dtype))
            rest = word & np.uint64(_LOW33)
            tagged &= rest < np.uint64(1 << top)
            code = rest | ((word >> np.uint64(63)) << np.uint64(top))
            code = np.where(tagged, code, np.uint64(0))
            tagged &= np.isnan(decode(code, dtype))
            fixed = codes[nan]
            fixed[tagged] = code[tagged].astype(codes.dtype)
            codes[nan] = fixed
    return codes


def wrap(x: np.ndarray, dtype: DataType) -> np.ndarray:
    """Integers (int64 array) reduced modulo 2**bits into `dtype`'s range
    (two's complement for signed types)."""
    b = dtype.bits
    x = np.asarray(x, dtype=np.int64)
    if b >= 64:
        return x
    mask = np.int64((1 << b) - 1)
    low = x & mask
    if dtype.is_signed:
        half = np.int64(1 << (b - 1))
        low = np.where(low >= half, low - np.int64(1 << b), low)
    return low


# Scalar semantics (wrap_int, convert_scalar, scalar_binary, ...) live in ir/evaluate.py,
# shared with the runtime.


# ---- elementwise operations on tiles -----------------------------------------------------

_FLOAT_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "exp2": np.exp2, "log": np.log,
    "log2": np.log2, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
}
_FLOAT_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "mod": np.mod,
    "min": np.minimum, "max": np.maximum,
}
_COMPARE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "lt": np.less, "le": np.less_equal, "eq": np.equal, "ne": np.not_equal,
    "gt": np.greater, "ge": np.greater_equal,
}
_INT_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum,
    "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
}
UNARY_ARITY = {"neg", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "not"}


def elementwise(op: str, args: list[tuple[np.ndarray, DataType]], out: DataType) -> np.ndarray:
    """`op` over already-broadcast float64 operand arrays (with their dtypes), rounded to
    `out`.

    - comparisons compare the exact values and give 0/1;
    - if `out` and every operand are integers: integer arithmetic in `out`'s dtype
      (operands and result wrapped modulo 2**bits; shift amounts are taken as they are);
      `div` and `mod` are floor division and modulo (Python's), a zero divisor is a
      `VMError`; shift amounts are unsigned (a negative one counts as huge), and
      `shl`/`shr` by >= the width give 0 (`shr` of a negative signed value: -1); `shr`
      is arithmetic on signed types;
    - otherwise: the exact operation in float64 (`mod` is floor-style, `np.mod`),
      rounded once to `out` (for f32/f16/bf16 and + - * / sqrt this is the correctly
      rounded result of computing in `out`'s precision).
    """
    arity = 1 if op in UNARY_ARITY else 3 if op == "fma" else 2
    if len(args) != arity:
        raise VMError(f"elementwise {op} takes {arity} operand(s), got {len(args)}")
    if op in _COMPARE:
        return round_to(_COMPARE[op](args[0][0], args[1][0]).astype(np.float64), out)
    integer = out.is_integer and all(t.is_integer for _, t in args)
    if op == "fma":
        if not out.is_float:
            raise VMError(f"elementwise fma needs a float result type, got {out}")
        return round_to(plain_nan(fma_round_to_odd(*(a for a, _ in args))), out)
    if integer:
        return _integer_op(op, args, out)
    if op not in _FLOAT_UNARY and op not in _FLOAT_BINARY:
        kinds = ", ".join(str(t) for _, t in args)
        raise VMError(f"elementwise {op} needs integer operands and result, got ({kinds}) "
                      f"-> {out}")
    with np.errstate(all="ignore"):
        if arity == 1:
            r = _FLOAT_UNARY[op](args[0][0])
        else:
            r = _FLOAT_BINARY[op](args[0][0], args[1][0])
    return round_to(plain_nan(r), out)


def fma_round_to_odd(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """`a * b + c` in float64, rounded to odd: the nearest float64 toward zero, with its
    last bit set where that is not exact. Why: rounding that once more to a format of
    at most 51 significant bits (f32, f16, bf16) gives the correctly rounded fma, where
    float64's own rounding followed by a second one could round twice in the same
    direction. The product of two such values is exact in float64, and TwoSum gives
    the sum's rounding error exactly."""
    with np.errstate(all="ignore"):
        p = a * b
        s = p + c
        bb = s - p
        error = (p - (s - bb)) + (c - bb)
        even = (s.view(np.int64) & 1) == 0
        inexact = (error != 0) & np.isfinite(s) & np.isfinite(error)
        toward = np.where(error > 0, np.inf, -np.inf)
        return np.where(inexact & even, np.nextafter(s, toward), s)


def plain_nan(x: np.ndarray) -> np.ndarray:
    """`x` with every NaN replaced by a NaN that carries no code: arithmetic results get
    the canonical NaN of their format (whatever NaN operand numpy propagated)."""
    x = np.asarray(x, dtype=np.float64)
    nan = np.isnan(x)
    return np.where(nan, np.nan, x) if nan.any() else x


def _integer_op(op: str, args: list[tuple[np.ndarray, DataType]], out: DataType) -> np.ndarray:
    if op in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt"):
        raise VMError(f"elementwise {op} needs a float result type, got {out}")
    a = wrap(args[0][0].astype(np.int64), out)
    if op == "neg":
        return wrap(-a, out).astype(np.float64)
    if op == "abs":
        return wrap(np.abs(a), out).astype(np.float64)
    if op == "not":
        return wrap(~a, out).astype(np.float64)
    raw_b = args[1][0].astype(np.int64)
    if op in ("shl", "shr"):
        # the amount is unsigned (as in PTX): a negative one is huge, like >= the width
        big = (raw_b < 0) | (raw_b >= 64)
        s = np.where(big, 63, raw_b)
        if op == "shl":
            r = (a.astype(np.uint64) << s.astype(np.uint64)).view(np.int64)
            r = np.where(big, 0, r)
        else:
            r = a >> s
        return wrap(r, out).astype(np.float64)
    b = wrap(raw_b, out)
    if op in ("div", "mod"):
        if (b == 0).any():
            raise VMError(f"elementwise {op}: integer division by zero")
        r = np.floor_divide(a, b) if op == "div" else np.mod(a, b)
        return wrap(r, out).astype(np.float64)
    if op not in _INT_BINARY:
        raise VMError(f"unknown elementwise operation {op!r}")
    return wrap(_INT_BINARY[op](a, b), out).astype(np.float64)


# ---- arguments ---------------------------------------------------------------------------

# The host-array convention is dtypes' (one rule for the interpreter and the runtime).
array_dtype = host_dtype


def to_host(values: np.ndarray | list, dtype: DataType | str) -> np.ndarray:
    """The host array (see `array_dtype`) holding `values` rounded to `dtype`, 1-D."""
    dtype = parse(dtype)
    codes = to_codes(np.asarray(values, dtype=np.float64).reshape(-1), dtype)
    if dtype.bits < 8:
        return pack(codes, dtype.bits)
    return codes.astype(np.dtype(dtype.code_dtype)).view(array_dtype(dtype))


def from_host(array: np.ndarray, dtype: DataType | str, count: int | None = None
              ) -> np.ndarray:
    """The float64 values of the first `count` elements (default: all) of a host array
    in `array_dtype(dtype)` format."""
    dtype = parse(dtype)
    raw = np.ascontiguousarray(array).reshape(-1)
    if dtype.bits < 8:
        bytes_ = raw.view(np.uint8)
        n = bytes_.size * 8 // dtype.bits if count is None else count
        return decode(unpack(bytes_, dtype.bits, n), dtype)
    codes = raw.view(np.dtype(dtype.code_dtype))
    return decode(codes if count is None else codes[:count], dtype)
