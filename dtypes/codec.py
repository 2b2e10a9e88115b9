"""Exact codecs between numbers (float64 on numpy) and the codes of a `DataType`.

One rule serves every format; it reads only the format's fields.

`decode(codes, dtype)` is exact for every code: each value of every format here is
a float64 (at most 24 significant bits, exponents far inside float64's range), except
the int64/uint64 values beyond 2^53, which round to the nearest float64.

`encode(values, dtype)` rounds to nearest, ties to even, exactly:
- floats: the quantum at a value's binade is `2^(e - M)` (at least the subnormal
  quantum); `values / quantum` is exact in float64 (a power-of-two scaling). A tie
  goes to the neighbour whose *code* is even: for M >= 1 that is IEEE's even
  mantissa; for M = 0 formats (every normal significand is 1) it is the even
  exponent field, a rule IEEE leaves open.
  Finite-only and FN formats saturate to +-max (inf included); IEEE-like formats
  overflow to +-inf by the same rounding rule. NaN gives the format's quiet NaN code
  (`DataType.nan_code`), and is a `DTypeError` for finite-only formats.
  The sign of zero is kept (-0.0 encodes to the negative-zero code).
- integers: round half to even, then saturate to [min, max]; NaN is a `DTypeError`.
  Saturation is exact for every width (a value at or beyond a bound gets that bound's
  code; 64-bit bounds are never clipped as floats, which would round past them), and
  integer input arrays are encoded as integers, never rounded through float64.

Codes are returned in the smallest unsigned numpy type that holds them
(`DataType.code_dtype`: uint8 for every low-bit type).
"""

from __future__ import annotations

import numpy as np

from tilevm.dtypes.datatype import DataType, DTypeError, Kind, Specials, parse


def _as_codes(codes: np.ndarray | int | list, dtype: DataType) -> np.ndarray:
    arr = np.asarray(codes)
    if arr.dtype.kind not in "iu":
        raise DTypeError(f"codes of {dtype} must be integers, got numpy dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or arr.max() >= dtype.num_codes):
        bad = arr[(arr < 0) | (arr >= dtype.num_codes)].flat[0]
        raise DTypeError(f"code {int(bad)} is out of range for {dtype} "
                         f"(codes are 0..{dtype.num_codes - 1})")
    return arr.astype(np.uint64)


def decode(codes: np.ndarray | int | list, dtype: DataType | str) -> np.ndarray:
    """The exact float64 value of each code (NaN and +-inf where the format has them)."""
    dtype = parse(dtype)
    c = _as_codes(codes, dtype)
    if dtype.kind is Kind.UNSIGNED:
        return c.astype(np.float64)
    if dtype.kind is Kind.SIGNED:
        signed = c.astype(np.int64) - ((c >> np.uint64(dtype.bits - 1)) << np.uint64(dtype.bits)
                                        ).astype(np.int64)
        return signed.astype(np.float64)

    e_bits, m_bits = dtype.exponent_bits, dtype.mantissa_bits
    sign = (c >> np.uint64(dtype.bits - 1)) & np.uint64(1)
    exp_field = ((c >> np.uint64(m_bits)) & np.uint64((1 << e_bits) - 1)).astype(np.int64)
    mantissa = (c & np.uint64((1 << m_bits) - 1)).astype(np.float64)
    # Normals carry the implicit leading one; subnormals (exp field 0) use the min exponent.
    significand = np.where(exp_field == 0, mantissa, mantissa + float(1 << m_bits))
    exponent = np.maximum(exp_field, 1) - dtype.bias - m_bits
    magnitude = np.ldexp(significand, exponent)

    top = (1 << e_bits) - 1
    if dtype.specials is Specials.IEEE:
        special = exp_field == top
        magnitude = np.where(special & (mantissa == 0), np.inf, magnitude)
        magnitude = np.where(special & (mantissa != 0), np.nan, magnitude)
    elif dtype.specials is Specials.FN:
        is_nan = (exp_field == top) & (mantissa == float((1 << m_bits) - 1))
        magnitude = np.where(is_nan, np.nan, magnitude)
    return np.where(sign == 1, -magnitude, magnitude)


def encode(values: np.ndarray | float | list, dtype: DataType | str) -> np.ndarray:
    """The code of each value, rounded to nearest with ties to even (see the module doc)."""
    dtype = parse(dtype)
    x = np.asarray(values)
    if x.dtype.kind not in "biuf":
        raise DTypeError(f"cannot encode values of numpy dtype {x.dtype} as {dtype}")
    out_type = np.dtype(dtype.code_dtype)
    if dtype.is_integer and x.dtype.kind in "biu":
        return _encode_integer(x, dtype).astype(out_type)
    x = x.astype(np.float64)
    nan = np.isnan(x)
    if nan.any() and not dtype.has_nan:
        raise DTypeError(f"{dtype} has no NaN; the input holds NaN at flat index "
                         f"{int(np.flatnonzero(nan)[0])}")
    if dtype.is_integer:
        return _encode_integer(x, dtype).astype(out_type)
    return _encode_float(x, nan, dtype).astype(out_type)


def _encode_integer(x: np.ndarray, dtype: DataType) -> np.ndarray:
    # Saturation selects the integer bound's code wherever the value reaches a bound.
    # It never clips in float64: float(2^63 - 1) and float(2^64 - 1) round up past the
    # range (to 2^63 and 2^64), whose codes would wrap around to -2^63 and 0.
    if x.dtype.kind in "biu":  # exact: integers are compared as integers, never as floats
        ints = x.astype(np.uint8) if x.dtype.kind == "b" else x
        below, above = _beyond_bounds(ints, np.iinfo(ints.dtype), dtype)
        inside = np.where(below | above, 0, ints)
    else:
        rounded = np.rint(x.astype(np.float64))
        below, above = rounded <= float(dtype.min_exact), rounded >= float(dtype.max_exact)
        # Every float strictly between the bounds converts exactly: below 2^63 for signed
        # types (through int64) and below 2^64 for unsigned ones (through uint64).
        inside = np.where(below | above, 0.0, rounded)
        inside = inside.astype(np.int64 if dtype.is_signed else np.uint64)
    # Two's complement in `bits` bits (a negative int64 cast to uint64 wraps mod 2^64).
    codes = inside.astype(np.uint64) & np.uint64(dtype.num_codes - 1)
    min_code = np.uint64(int(dtype.min_exact) % dtype.num_codes)
    max_code = np.uint64(int(dtype.max_exact))
    return np.where(below, min_code, np.where(above, max_code, codes))


def _beyond_bounds(ints: np.ndarray, info: np.iinfo, dtype: DataType
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Masks of the integers below `dtype.min` and above `dtype.max`; a bound outside the
    array's own numpy range is never crossed (and is not compared, so nothing overflows)."""
    lo, hi = int(dtype.min_exact), int(dtype.max_exact)
    below = ints < lo if info.min < lo else np.zeros(ints.shape, dtype=bool)
    above = ints > hi if info.max > hi else np.zeros(ints.shape, dtype=bool)
    return below, above


def _encode_float(x: np.ndarray, nan: np.ndarray, dtype: DataType) -> np.ndarray:
    m_bits = dtype.mantissa_bits
    negative = np.signbit(x)
    a = np.where(nan, 0.0, np.abs(x))
    # Clamp first: finite formats saturate at max; IEEE formats at 2^(emax+1), which is
    # exactly where the inf code sits in the sequence of magnitude codes below.
    if dtype.specials is Specials.IEEE:
        a = np.minimum(a, 2.0 ** (dtype.max_exponent + 1))
    else:
        a = np.minimum(a, dtype.max)

    # Positive codes enumerate the magnitudes in increasing order, subnormals first:
    # the value floor(a / q) * q at binade e (quantum q = 2^(e - M)) has code
    # ((e - e_min) << M) + floor(a / q), whether it is normal or subnormal.
    _, frexp_exp = np.frexp(a)
    binade = np.where(a > 0, frexp_exp.astype(np.int64) - 1, dtype.min_exponent)
    binade = np.maximum(binade, dtype.min_exponent)  # subnormals share the smallest binade
    scaled = np.ldexp(a, -(binade - m_bits))  # exact: a power-of-two scaling
    floor = np.floor(scaled)
    fraction = scaled - floor
    code = ((binade - dtype.min_exponent) << m_bits) + floor.astype(np.int64)
    # Round to nearest; a tie goes to the even code (the even mantissa when M >= 1).
    code += (fraction > 0.5) | ((fraction == 0.5) & (code % 2 == 1))

    code = code.astype(np.uint64)
    code = np.where(negative, code | np.uint64(1 << (dtype.bits - 1)), code)
    if dtype.nan_code is not None:
        code = np.where(nan, np.uint64(dtype.nan_code), code)
    return code


_NUMPY_FLOATS = {"f16": np.float16, "f32": np.float32}


def host_dtype(dtype: DataType | str) -> np.dtype:
    """The numpy dtype of host arrays holding elements of `dtype` (kernel arguments, the
    interpreter's and the device arrays' convention): float16/float32 for f16/f32, the
    numpy integer type for 8..64-bit integers, and the codes (`DataType.code_dtype`)
    for everything else: uint16 for bf16, uint8 for 8-bit floats and, as densely packed
    bytes (`pack`), for every sub-byte type."""
    dtype = parse(dtype)
    if dtype.name in _NUMPY_FLOATS:
        return np.dtype(_NUMPY_FLOATS[dtype.name])
    if dtype.bits < 8 or dtype.is_float:
        return np.dtype(dtype.code_dtype)
    return np.dtype(f"{'int' if dtype.is_signed else 'uint'}{dtype.bits}")

