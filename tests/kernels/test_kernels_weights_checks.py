"""`QuantizedWeight` checks its fields on construction: each rejection names the field
(and, for values, the first bad element), and the boundaries stay accepted, with
`dequantize` still giving `(decode(code) - zero) * scale` there.

Runs on numpy, and on torch CPU tensors where torch is installed."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from tilevm import dtypes
from tilevm.kernels import weights as W

LIBS = ["numpy"] + (["torch"] if importlib.util.find_spec("torch") is not None else [])
K, N, G = 64, 16, 32
ROW, COL = 1, 3  # the element each value test changes


def pieces(lib: str, dtype: str = "uint4", zero_point: bool = True,
           scale_dtype: str = "f16") -> dict:
    w = np.random.default_rng(0).standard_normal((K, N))
    if lib == "torch":
        import torch

        w = torch.from_numpy(w)
    qw = W.quantize(w, dtype, G, zero_point=zero_point, scale_dtype=scale_dtype)
    return dict(packed=qw.packed, scales=qw.scales, zeros=qw.zeros, dtype=qw.dtype,
                group_size=G, shape=(K, N))


def with_value(a, value: float):
    """A copy of a scales/zeros array with element (ROW, COL) set to `value` (numpy bf16:
    its uint16 bit pattern)."""
    if isinstance(a, np.ndarray):
        a = a.copy()
        a[ROW, COL] = dtypes.encode(value, "bf16") if a.dtype == np.uint16 else value
        return a
    a = a.clone()
    a[ROW, COL] = value
    return a


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("sdt", ["f16", "bf16"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 0.0, -0.0, -1.0])
def test_scales_must_be_finite_and_positive(lib: str, sdt: str, bad: float) -> None:
    p = pieces(lib, scale_dtype=sdt)
    with pytest.raises(ValueError, match=rf"scales must be finite and positive; "
                                         rf"scales\[{ROW}, {COL}\] is"):
        W.QuantizedWeight(**{**p, "scales": with_value(p["scales"], bad)})


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("sdt", ["f16", "bf16"])
@pytest.mark.parametrize("bad", [16.0, 300.0, -1.0, 2.5, math.nan, math.inf])
def test_zero_points_must_be_codes(lib: str, sdt: str, bad: float) -> None:
    p = pieces(lib, scale_dtype=sdt)
    with pytest.raises(ValueError, match=rf"zeros must be integers in uint4's code range "
                                         rf"0..15; zeros\[{ROW}, {COL}\] is"):
        W.QuantizedWeight(**{**p, "zeros": with_value(p["zeros"], bad)})


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("sdt", ["f16", "bf16"])
def test_the_boundaries_are_accepted(lib: str, sdt: str) -> None:
    t = dtypes.parse(sdt)
    p = pieces(lib, scale_dtype=sdt)
    codes = W.QuantizedWeight(**p).codes()
    code = int(codes[ROW * G, COL])  # a weight of scale group ROW
    for scale in (t.smallest_subnormal, t.max):
        for zero in (0.0, 15.0):
            qw = W.QuantizedWeight(**{**p, "scales": with_value(p["scales"], scale),
                                      "zeros": with_value(p["zeros"], zero)})
            # numpy dequantizes in float64, torch in float32 (bf16's max * 10 overflows)
            real = np.float64 if lib == "numpy" else np.float32
            with np.errstate(over="ignore"):
                expected = real(code - zero) * real(scale)
            assert float(qw.dequantize()[ROW * G, COL]) == float(expected)


@pytest.mark.parametrize("lib", LIBS)
def test_fields_are_checked(lib: str) -> None:
    p = pieces(lib)
    symmetric = pieces(lib, "int4", zero_point=False)
    as_int8 = p["packed"].view(np.int8) if lib == "numpy" else p["packed"].view(
        __import__("torch").int8)
    for change, error, message in [
        (dict(packed=as_int8), TypeError, "packed must be uint8"),
        (dict(packed=p["packed"].tolist()), TypeError, "packed must be a numpy array"),
        (dict(scales=None), TypeError, "scales must be a numpy array"),
        (dict(shape=(64.0, 16)), ValueError, r"shape must be \(K, N\)"),
        (dict(shape=(0, 16)), ValueError, r"shape must be \(K, N\)"),
        (dict(shape=(64,)), ValueError, r"shape must be \(K, N\)"),
        (dict(group_size=32.0), TypeError, "group_size must be an integer"),
        (dict(group_size=True), TypeError, "group_size must be an integer"),
        (dict(group_size=0), ValueError, "positive divisor of K"),
        (dict(group_size=-2), ValueError, "positive divisor of K"),
        (dict(group_size=48), ValueError, "positive divisor of K"),
        (dict(dtype="f4e2m1"), ValueError, "zero points are for unsigned int formats"),
    ]:
        with pytest.raises(error, match=message):
            W.QuantizedWeight(**{**p, **change})
    with pytest.raises(ValueError, match="zero points are for unsigned int formats"):
        W.QuantizedWeight(**{**symmetric, "zeros": p["zeros"]})
    # Accepted: numpy integer fields, group_size -1 (per-channel) or K, symmetric weights.
    qw = W.QuantizedWeight(**{**p, "shape": (np.int64(K), np.int32(N)),
                              "group_size": np.int64(G)})
    assert qw.shape == (K, N) and type(qw.shape[0]) is int and qw.group_size == G
    one_group = pieces(lib, zero_point=False)
    for g in (-1, K):
        scales = one_group["scales"][:1]
        assert W.QuantizedWeight(**{**one_group, "scales": scales, "group_size": g}
                                 ).group_size == K
