"""Integer saturation at every integer type's bounds (64-bit included), checked against
Python's exact integers, and the argument checks of the packing functions."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from tilevm import dtypes
from tilevm.dtypes import DataType, DTypeError

INTEGERS = tuple(t for t in dtypes.all_dtypes() if t.is_integer)


def expected_code(value: int | float, t: DataType) -> int:
    """Round half to even, saturate to [min, max], two's complement: in exact arithmetic."""
    lo, hi = int(t.min_exact), int(t.max_exact)
    if math.isinf(value):
        nearest = hi if value > 0 else lo
    else:
        nearest = min(max(round(Fraction(value)), lo), hi)  # round(): half to even
    return nearest % (1 << t.bits)


def probe_values(t: DataType) -> list[int | float]:
    """The bounds and their neighbours as Python ints, as float64 (each bound, the floats
    either side of it, halfway points), far beyond, and +-inf."""
    lo, hi = int(t.min_exact), int(t.max_exact)
    ints = [lo, lo + 1, hi - 1, hi, lo - 1, hi + 1, 0]
    floats = [float(v) for v in ints] + [lo - 0.5, hi + 0.5, hi - 0.5, lo + 0.5]
    for bound in (float(lo), float(hi)):
        floats += [np.nextafter(bound, -np.inf), np.nextafter(bound, np.inf)]
    floats += [1e30, -1e30, 2.0**64, -(2.0**64), 2.0**63, -(2.0**63), math.inf, -math.inf]
    return ints + [float(v) for v in floats]


@pytest.mark.parametrize("t", INTEGERS, ids=str)
def test_integer_saturation_is_exact_at_the_bounds(t):
    for value in probe_values(t):
        if isinstance(value, int) and not -(2**63) <= value < 2**64:
            continue  # numpy holds no such integer (np.asarray gives an object array)
        got = int(dtypes.encode(value, t))
        assert got == expected_code(value, t), (t, value)


def test_64_bit_overflow_saturates_instead_of_wrapping():
    assert int(dtypes.encode(1e30, "int64")) == 2**63 - 1
    assert int(dtypes.encode(-1e30, "int64")) == 2**63  # the code of -2^63
    assert int(dtypes.encode(2.0**64, "uint64")) == 2**64 - 1
    assert int(dtypes.encode(2.0**63, "int64")) == 2**63 - 1


def test_integer_inputs_are_not_rounded_through_float64():
    # 2^63 - 1000 is no float64; an integer array is encoded exactly.
    codes = dtypes.encode(np.array([2**63 - 1000, -(2**63) + 3], np.int64), "int64")
    assert [int(c) for c in codes] == [2**63 - 1000, 2**64 - 2**63 + 3]
    assert int(dtypes.encode(np.uint64(2**64 - 1), "int64")) == 2**63 - 1
    assert int(dtypes.encode(np.int8(-5), "uint8")) == 0
    assert dtypes.encode([True, False], "uint1").tolist() == [1, 0]


@pytest.mark.parametrize("t", ["int4", "uint8", "int64", "uint64"])
def test_integer_nan_is_an_error_naming_it(t):
    with pytest.raises(DTypeError, match="no NaN.*flat index 1"):
        dtypes.encode([1.0, math.nan], t)


# ---- packing arguments -----------------------------------------------------------------

@pytest.mark.parametrize("count", [-100, -1, 3.0, True, "4", None])
def test_packed_size_rejects_bad_counts(count):
    with pytest.raises(ValueError, match="count must be a non-negative integer"):
        dtypes.packed_size(count, 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="count must be a non-negative integer"):
        dtypes.unpack(np.zeros(8, np.uint8), 4, count)  # type: ignore[arg-type]


@pytest.mark.parametrize("bits", [0, -4, 9, 4.0, True, None])
def test_packing_rejects_bad_bit_widths(bits):
    for call in (lambda: dtypes.packed_size(8, bits), lambda: dtypes.pack([1], bits),
                 lambda: dtypes.unpack(np.zeros(8, np.uint8), bits, 1)):
        with pytest.raises(ValueError, match=r"bits \(the bit width\) must be an integer in 1..8"):
            call()


def test_packing_accepts_the_edges():
    assert dtypes.packed_size(0, 1) == 0
    assert dtypes.packed_size(np.int64(9), np.uint8(8)) == 9
    assert dtypes.packed_size(1, 1) == 1 and dtypes.packed_size(9, 7) == 8
    assert dtypes.unpack(dtypes.pack([], 5), 5, 0).size == 0
