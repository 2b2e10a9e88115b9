"""The weight path (tilevm.kernels.weights, .weight_format): encode, pack/unpack,
quantize, dequantize.

Every test runs on numpy, and on torch CPU tensors where torch is installed; GPU tests
(`gpu` marker) repeat the checks on CUDA tensors. The references here are independent of
the code under test: a brute-force nearest-value search over every code (`dtypes.decode`
enumerates the values), `tilevm.dtypes.pack` for the bytes, and the documented
quantization formulas in plain float64 numpy.
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kernel_harness import cuda_torch

from tilevm import dtypes
from tilevm.dtypes import DataType, DTypeError, Kind
from tilevm.kernels import weight_format as F
from tilevm.kernels import weights as W

HAS_TORCH = importlib.util.find_spec("torch") is not None
LIBS = ["numpy"] + (["torch"] if HAS_TORCH else [])
WEIGHT_TYPES = dtypes.lowbit_dtypes()  # int1..int8, uint1..uint8, every f{b}e{E}m{M}
UNSIGNED = tuple(t for t in WEIGHT_TYPES if t.kind is Kind.UNSIGNED)
CODEC_TYPES = WEIGHT_TYPES + (dtypes.f16, dtypes.bf16)
GROUPS = [32, 64, 128, -1]


def ids(t: DataType) -> str:
    return t.name


def to_lib(a: np.ndarray, lib: str, device: str = "cpu"):
    if lib == "numpy":
        return a
    import torch

    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


def to_numpy(a) -> np.ndarray:
    """numpy view of a result; torch f16/bf16 come back as float64 values."""
    if isinstance(a, np.ndarray):
        return a
    if a.dtype.is_floating_point:
        return a.detach().cpu().double().numpy()
    return a.detach().cpu().numpy()


def stored_values(a) -> np.ndarray:
    """Scales/zeros as float64: numpy bf16 is stored as uint16 bit patterns."""
    if isinstance(a, np.ndarray) and a.dtype == np.uint16:
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return to_numpy(a).astype(np.float64)


# ---- independent references ------------------------------------------------------------

def ref_nearest(x: np.ndarray, t: DataType) -> np.ndarray:
    """Brute force over every code: the nearest finite value, ties to the even code; a
    float keeps the sign of x (so -0.0 and small negatives go to negative codes)."""
    codes = np.arange(t.num_codes)
    values = dtypes.decode(codes, t)
    flat = np.asarray(x, dtype=np.float64).reshape(-1)
    negative = np.signbit(flat)
    flat = np.clip(flat, t.min, t.max)  # saturation (and no rounding in huge distances)
    dist = np.abs(values[None, :] - flat[:, None])
    dist[:, ~np.isfinite(values)] = np.inf
    if t.is_float:
        code_negative = (codes >> (t.bits - 1)) == 1
        dist[code_negative[None, :] != negative[:, None]] = np.inf
    best = dist.min(axis=1, keepdims=True)
    preference = np.where(dist == best, codes % 2, 2)  # even first, then odd, never others
    return codes[np.argmin(preference, axis=1)].reshape(np.shape(x)).astype(np.uint8)


def ref_round_float(r: np.ndarray, mantissa_bits: int, min_exponent: int) -> np.ndarray:
    """Round non-negative finite values to a binary float format, nearest even (no
    overflow handling: the tests' scales are in range)."""
    _, e = np.frexp(r)  # r in [2^(e-1), 2^e)
    quantum = np.ldexp(1.0, np.maximum(e - 1 - mantissa_bits, min_exponent - mantissa_bits))
    return np.rint(r / quantum) * quantum


def ref_round_scale(r: np.ndarray, sdt: DataType) -> np.ndarray:
    if sdt == dtypes.f16:
        return ref_round_float(r, 10, -14)
    return ref_round_float(r, 7, -126)


def ref_quantize(w: np.ndarray, t: DataType, g: int, zero_point: bool, sdt: DataType):
    """(codes, scales, zeros or None) by the module doc's formulas, in float64."""
    K, N = w.shape
    g = K if g == -1 else g
    groups = w.astype(np.float64).reshape(K // g, g, N)
    if zero_point:
        levels = 2.0 ** t.bits - 1
        lo = np.minimum(groups.min(axis=1), 0.0)
        hi = np.maximum(groups.max(axis=1), 0.0)
        ratio = (hi - lo) / levels
    else:
        qmax = t.max if t.max > 0 else 1.0
        ratio = np.abs(groups).max(axis=1) / qmax
    scale = ref_round_scale(np.where(ratio > 0, ratio, 1.0), sdt)
    scale = np.where(scale > 0, scale, sdt.smallest_subnormal)
    scaled = groups / scale[:, None, :]
    zero = None
    if zero_point:
        zero = np.clip(np.rint(-lo / scale), 0, levels)
        scaled = scaled + zero[:, None, :]
    scaled = np.clip(scaled, t.min, t.max)
    return ref_nearest(scaled.reshape(K, N), t), scale, zero


def ref_dequantize(codes, scale, zero, t: DataType, g: int) -> np.ndarray:
    K, N = codes.shape
    values = dtypes.decode(codes, t).reshape(K // g, g, N)
    if zero is not None:
        values = values - zero[:, None, :]
    return (values * scale[:, None, :]).reshape(K, N)


def weights(rng: np.random.Generator, K: int, N: int) -> np.ndarray:
    """Gaussian weights with an all-zero column (scale 1.0), a column of tiny values (a
    scale that underflows the scale dtype), an all-positive and an all-negative column."""
    w = rng.standard_normal((K, N))
    w[:, 0] = 0.0
    w[:, 1] *= 1e-30
    w[:, 2] = np.abs(w[:, 2]) + 0.5
    w[:, 3] = -np.abs(w[:, 3])
    w[::7, 4] = -0.0
    return w


# ---- encode ------------------------------------------------------------------------------

def special_inputs(t: DataType) -> np.ndarray:
    """Every value, every halfway point between neighbours, one float64 ulp either side,
    out-of-range values, infinities and both zeros."""
    values = dtypes.decode(np.arange(t.num_codes), t)
    values = np.unique(values[np.isfinite(values)])
    mids = (values[1:] + values[:-1]) / 2
    top = t.max * 2.0 + 1.0
    extra = [0.0, -0.0, np.inf, -np.inf, top, -top, 1e300, -1e300, 5e-324, -5e-324]
    return np.concatenate([values, -values, mids, -mids, np.nextafter(mids, np.inf),
                           np.nextafter(mids, -np.inf), -np.nextafter(mids, np.inf), extra])


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("t", CODEC_TYPES, ids=ids)
def test_encode_matches_dtypes_encode(t: DataType, lib: str) -> None:
    x = np.concatenate([special_inputs(t),
                        np.random.default_rng(1).standard_normal(500) * min(t.max, 1e6)])
    got = W.encode(to_lib(x, lib), t)
    np.testing.assert_array_equal(to_numpy(got).astype(np.int64),
                                  dtypes.encode(x, t).astype(np.int64))
    if lib == "numpy":
        assert got.dtype == np.dtype(t.code_dtype)
    else:
        assert str(got.dtype) == ("torch.uint8" if t.bits <= 8 else "torch.int32")


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("t", WEIGHT_TYPES, ids=ids)
def test_encode_matches_brute_force(t: DataType, lib: str) -> None:
    x = special_inputs(t)
    # The brute force saturates; f8e5m2's encode overflows to inf beyond max + ulp/2.
    x = x[np.abs(x) <= t.max] if t.has_inf else x[np.isfinite(x)]
    np.testing.assert_array_equal(to_numpy(W.encode(to_lib(x, lib), t)), ref_nearest(x, t))


@pytest.mark.parametrize("lib", LIBS)
def test_encode_nan(lib: str) -> None:
    x = np.array([1.0, np.nan, -np.nan])
    for t in CODEC_TYPES:
        if t.has_nan:
            got = to_numpy(W.encode(to_lib(x, lib), t)).astype(np.int64)
            np.testing.assert_array_equal(got, dtypes.encode(x, t).astype(np.int64))
        else:
            with pytest.raises(DTypeError, match="has no NaN"):
                W.encode(to_lib(x, lib), t)


@given(t=st.sampled_from(CODEC_TYPES), lib=st.sampled_from(LIBS),
       xs=st.lists(st.floats(allow_nan=False, allow_subnormal=True), min_size=1,
                   max_size=40),
       scale=st.sampled_from([1.0, 2.0 ** -20, 3.0, 2.0 ** 20]))
def test_encode_property(t: DataType, lib: str, xs: list[float], scale: float) -> None:
    with np.errstate(over="ignore"):
        x = np.asarray(xs) * scale  # may overflow to inf: encoded like any inf input
    got = to_numpy(W.encode(to_lib(x, lib), t)).astype(np.int64)
    np.testing.assert_array_equal(got, dtypes.encode(x, t).astype(np.int64))


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_encode_torch_input_types() -> None:
    import torch

    x = torch.randn(300) * 10
    for torch_type in (torch.float16, torch.bfloat16, torch.float32):
        xt = x.to(torch_type)
        for t in (dtypes.int4, dtypes.f4e2m1, dtypes.f8e4m3):
            np.testing.assert_array_equal(W.encode(xt, t).numpy(),
                                          dtypes.encode(xt.double().numpy(), t))


# ---- pack / unpack ---------------------------------------------------------------------------

def ref_pack_rows(codes: np.ndarray, bits: int) -> np.ndarray:
    return np.stack([dtypes.pack(row, bits) for row in codes])


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("bits", range(1, 9))
def test_pack_matches_dtypes_pack(bits: int, lib: str) -> None:
    t = dtypes.parse(f"uint{bits}")
    codes = np.random.default_rng(bits).integers(0, 1 << bits, size=(13, 48), dtype=np.uint8)
    packed = F.pack_weights(to_lib(codes, lib), t)
    assert tuple(packed.shape) == (13, 48 * bits // 8)
    np.testing.assert_array_equal(to_numpy(packed), ref_pack_rows(codes, bits))
    assert str(packed.dtype) in ("uint8", "torch.uint8")
    back = F.unpack_weights(packed, t)
    np.testing.assert_array_equal(to_numpy(back), codes)
    assert str(back.dtype) in ("uint8", "torch.uint8")


@given(bits=st.integers(1, 8), K=st.integers(1, 6), groups=st.integers(1, 6),
       lib=st.sampled_from(LIBS), seed=st.integers(0, 2 ** 32 - 1))
def test_pack_round_trip_property(bits: int, K: int, groups: int, lib: str, seed: int) -> None:
    codes = np.random.default_rng(seed).integers(0, 1 << bits, size=(K, 8 * groups),
                                                 dtype=np.uint8)
    t = dtypes.parse(f"int{bits}")  # the format only depends on the width
    packed = F.pack_weights(to_lib(codes, lib), t)
    np.testing.assert_array_equal(to_numpy(packed), ref_pack_rows(codes, bits))
    np.testing.assert_array_equal(to_numpy(F.unpack_weights(packed, t)), codes)


def test_pack_golden() -> None:
    # docs/dtypes.md: int3 values [1, -1, 3, -4, 0, 2, -2, 1] pack to F9 08 39.
    codes = dtypes.encode(np.array([[1, -1, 3, -4, 0, 2, -2, 1]] * 2, dtype=float), "int3")
    np.testing.assert_array_equal(F.pack_weights(codes, "int3"), [[0xF9, 0x08, 0x39]] * 2)


# ---- quantize against the reference ----------------------------------------------------------

def check_against_reference(w: np.ndarray, t: DataType, g: int, lib: str, *,
                            zero_point: bool = False, sdt: DataType = dtypes.f16,
                            device: str = "cpu") -> W.QuantizedWeight:
    K, N = w.shape
    qw = W.quantize(to_lib(w, lib, device), t, g, zero_point=zero_point,
                    scale_dtype=None if sdt == dtypes.f16 else sdt.name)
    codes, scale, zero = ref_quantize(w, t, g, zero_point, sdt)
    gs = K if g == -1 else g
    assert qw.shape == (K, N) and qw.group_size == gs and qw.dtype == t
    assert qw.format == F.ROW_PACKED and qw.scale_dtype == sdt
    np.testing.assert_array_equal(to_numpy(qw.codes()), codes)
    np.testing.assert_array_equal(to_numpy(qw.packed), ref_pack_rows(codes, t.bits))
    np.testing.assert_array_equal(stored_values(qw.scales), scale)
    if zero_point:
        np.testing.assert_array_equal(stored_values(qw.zeros), zero)
    else:
        assert qw.zeros is None
    deq = qw.dequantize()
    expected = ref_dequantize(codes, scale, zero, t, gs)
    np.testing.assert_array_equal(to_numpy(deq), expected)  # exact, float32 on torch too
    assert str(deq.dtype) == ("float64" if lib == "numpy" else "torch.float32")
    assert np.isfinite(expected).all()  # never a NaN or inf code
    return qw


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("g", GROUPS)
@pytest.mark.parametrize("t", WEIGHT_TYPES, ids=ids)
def test_quantize_matches_reference(t: DataType, g: int, lib: str) -> None:
    w = weights(np.random.default_rng(t.bits * 10 + t.exponent_bits), 128, 16)
    check_against_reference(w, t, g, lib)


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("g", GROUPS)
@pytest.mark.parametrize("t", UNSIGNED, ids=ids)
def test_quantize_zero_point_matches_reference(t: DataType, g: int, lib: str) -> None:
    K = 128
    w = weights(np.random.default_rng(t.bits), K, 16)
    qw = check_against_reference(w, t, g, lib, zero_point=True)
    gs = K if g == -1 else g
    codes = to_numpy(qw.codes()).astype(np.int64).reshape(K // gs, gs, 16)
    zeros = stored_values(qw.zeros)
    scales = stored_values(qw.scales)
    levels = 2 ** t.bits - 1
    # Integer zero points in [0, L]; the group minimum maps to code 0 (when below 0).
    assert np.array_equal(zeros, np.rint(zeros)) and zeros.min() >= 0 and zeros.max() <= levels
    groups = w.reshape(K // gs, gs, 16)
    argmin = groups.argmin(axis=1)
    min_codes = np.take_along_axis(codes, argmin[:, None, :], axis=1)[:, 0, :]
    negative = groups.min(axis=1) < 0
    assert (min_codes[negative] == 0).all()
    # 0.0 is exact: a zero weight gets the code `zero`.
    assert (codes[:, :, 0] == zeros[:, None, 0]).all()
    # Error at most half a step, except where a rounded-down scale saturates the top.
    deq = to_numpy(qw.dequantize()).reshape(K // gs, gs, 16)
    inside = codes < levels
    err = np.abs(deq - groups)
    bound = np.broadcast_to(scales[:, None, :] / 2, err.shape)
    assert (err[inside] <= bound[inside] * (1 + 1e-12)).all()


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("t", [dtypes.int4, dtypes.uint4, dtypes.f4e2m1, dtypes.f8e4m3,
                               dtypes.f6e3m2, dtypes.f7e6m0], ids=ids)
def test_quantize_bf16_scales(t: DataType, lib: str) -> None:
    w = weights(np.random.default_rng(5), 64, 24)
    qw = check_against_reference(w, t, 32, lib, sdt=dtypes.bf16)
    assert str(qw.scales.dtype) == ("uint16" if lib == "numpy" else "torch.bfloat16")
    if t.kind is Kind.UNSIGNED:
        check_against_reference(w, t, 32, lib, zero_point=True, sdt=dtypes.bf16)


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_quantize_torch_defaults_to_input_half_type() -> None:
    import torch

    w = torch.randn(64, 16)
    assert W.quantize(w.bfloat16(), "int4", 32).scales.dtype == torch.bfloat16
    assert W.quantize(w.half(), "int4", 32).scales.dtype == torch.float16
    assert W.quantize(w, "int4", 32).scales.dtype == torch.float16
    assert W.quantize(w, "int4", 32, scale_dtype=torch.bfloat16).scales.dtype == torch.bfloat16
    assert not W.quantize(w.clone().requires_grad_(), "int4", 32).scales.requires_grad
    transposed = torch.randn(16, 64).t()  # not contiguous
    np.testing.assert_array_equal(W.quantize(transposed, "int4", 32).packed.numpy(),
                                  W.quantize(transposed.numpy(), "int4", 32).packed)
    # A half-precision input quantizes like its exact float64 values.
    wb = w.bfloat16()
    a = W.quantize(wb, "f4e2m1", 32, scale_dtype="f16")
    b = W.quantize(wb.double().numpy(), "f4e2m1", 32)
    np.testing.assert_array_equal(a.packed.numpy(), b.packed)


def test_quantize_accepts_float16_and_float32_numpy() -> None:
    w = np.random.default_rng(3).standard_normal((64, 8))
    for np_type in (np.float16, np.float32):
        a = W.quantize(w.astype(np_type), "int5", 32)
        b = W.quantize(w.astype(np_type).astype(np.float64), "int5", 32)
        np.testing.assert_array_equal(a.packed, b.packed)
        np.testing.assert_array_equal(a.scales, b.scales)


@pytest.mark.parametrize("t", [t for t in WEIGHT_TYPES if t.name != "int1"], ids=ids)
def test_quantize_matches_example_helpers(t: DataType) -> None:
    # examples/quantized_matmul.py defines today's format; its quantize (no zero points,
    # f16 scales) must give the same bytes and scales. (int1 divides by its max, 0, there.)
    qmm = importlib.import_module("tilevm.examples.quantized_matmul")
    w = np.random.default_rng(7).standard_normal((64, 16))
    qw = W.quantize(w, t, 32)
    packed, scales = qmm.quantize(w, t, 32)
    np.testing.assert_array_equal(qw.packed, packed)
    np.testing.assert_array_equal(qw.scales, scales)
    np.testing.assert_array_equal(qw.dequantize(), qmm.dequantize(packed, scales, t, 32))
    np.testing.assert_array_equal(F.unpack_weights(packed, t), qmm.unpack_weights(packed, t))


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
@pytest.mark.parametrize("t", [dtypes.int3, dtypes.uint4, dtypes.f5e2m2, dtypes.f8e5m2],
                         ids=ids)
def test_numpy_and_torch_agree(t: DataType) -> None:
    import torch

    w = np.random.default_rng(11).standard_normal((256, 40))
    for zp in [False, True] if t.kind is Kind.UNSIGNED else [False]:
        a = W.quantize(w, t, 64, zero_point=zp)
        b = W.quantize(torch.from_numpy(w), t, 64, zero_point=zp)
        np.testing.assert_array_equal(a.packed, b.packed.numpy())
        np.testing.assert_array_equal(a.scales.astype(np.float64), b.scales.double().numpy())
        np.testing.assert_array_equal(a.dequantize(), b.dequantize().double().numpy())


def test_f8e5m2_never_overflows_to_inf() -> None:
    # A tiny group's f16 scale is subnormal and may round down a lot: the scaled values
    # exceed max and would encode to inf; quantize saturates them instead.
    w = np.random.default_rng(2).standard_normal((64, 8)) * 1e-4
    for t in (dtypes.f8e5m2, dtypes.f8e4m3):
        values = W.quantize(w, t, 32).dequantize()
        assert np.isfinite(values).all()


# ---- the fragments format: any N, K = 3 groups ----------------------------------------------

@pytest.mark.parametrize("t, zero_point, N, g, lib", [
    (t, zp, N, g, lib) for t, zp, N, g in ((dtypes.int4, False, 1, 128),
                                           (dtypes.uint4, True, 7, 64),
                                           (dtypes.f4e2m1, False, 100, 32))
    for lib in LIBS] + [
    (dtypes.int3, False, 4100, 32, "numpy"), (dtypes.uint2, True, 12289, 32, "numpy")],
    ids=lambda v: v.name if isinstance(v, DataType) else str(v))
def test_fragments_take_any_n(t: DataType, zero_point: bool, N: int, g: int, lib: str) -> None:
    """N in issue 43's acceptance set (none a multiple of 8) and K = 3 groups: the codes,
    scales and zero points of the reference formulas, padded to whole 32-column atoms
    with zero codes, unit scales and zero zero points, packed as the fragments format
    packs the padded codes; the round trip gives the reference's weights exactly."""
    K = 3 * g
    w = weights(np.random.default_rng(N), K, max(N, 5))[:, :N]
    qw = W.quantize(to_lib(w, lib), t, g, zero_point=zero_point, format=F.FRAGMENTS)
    codes, scale, zero = ref_quantize(w, t, g, zero_point, dtypes.f16)
    Np = -(-N // 32) * 32
    assert qw.shape == (K, N) and F.padded_n(N) == Np
    assert tuple(qw.packed.shape) == (K // 32, Np * 4 * t.bits)
    padded = np.zeros((K, Np), np.uint8)
    padded[:, :N] = codes
    np.testing.assert_array_equal(to_numpy(qw.packed), F.pack_weights(padded, t, F.FRAGMENTS))
    np.testing.assert_array_equal(to_numpy(qw.codes()), codes)
    np.testing.assert_array_equal(stored_values(qw.scales),
                                  np.pad(scale, ((0, 0), (0, Np - N)), constant_values=1.0))
    if zero_point:
        np.testing.assert_array_equal(stored_values(qw.zeros),
                                      np.pad(zero, ((0, 0), (0, Np - N))))
    np.testing.assert_array_equal(to_numpy(qw.dequantize()),
                                  ref_dequantize(codes, scale, zero, t, g))


def test_only_the_row_packed_format_needs_n_a_multiple_of_8() -> None:
    w = np.random.default_rng(0).standard_normal((128, 12))
    with pytest.raises(ValueError, match="row_packed format needs N a multiple of 8.*"
                                         "format='fragments' takes any N"):
        W.quantize(w, "int4", 64)
    assert W.quantize(w, "int4", 64, format=F.FRAGMENTS).shape == (128, 12)
    # Per-channel (the group is K): the fragments format's atoms need K a multiple of 32.
    with pytest.raises(ValueError, match="fragments format needs K a multiple of 32"):
        W.quantize(w[:100], "int4", -1, format=F.FRAGMENTS)
    assert W.quantize(w[:100, :8], "int4", -1).group_size == 100


# ---- QuantizedWeight ---------------------------------------------------------------------------

@pytest.mark.parametrize("lib", LIBS)
def test_quantized_weight_fields(lib: str) -> None:
    K, N = 256, 32
    w = np.random.default_rng(0).standard_normal((K, N))
    qw = W.quantize(to_lib(w, lib), "uint3", 64, zero_point=True)
    assert qw.nbytes == K * N * 3 // 8 + 2 * (K // 64) * N * 2
    assert W.quantize(to_lib(w, lib), "int3", 64).nbytes == K * N * 3 // 8 + (K // 64) * N * 2
    assert tuple(qw.packed.shape) == (K, N * 3 // 8)
    assert tuple(qw.scales.shape) == tuple(qw.zeros.shape) == (K // 64, N)
    np.testing.assert_array_equal(to_numpy(W.dequantize(qw)), to_numpy(qw.dequantize()))
    per_channel = W.quantize(to_lib(w, lib), "int4", -1)
    assert per_channel.group_size == K and tuple(per_channel.scales.shape) == (1, N)
    same = W.quantize(to_lib(w, lib), "int4", K)
    np.testing.assert_array_equal(to_numpy(same.packed), to_numpy(per_channel.packed))
    # Built by hand from the pieces (codes and scales of another source).
    rebuilt = W.QuantizedWeight(packed=qw.packed, scales=qw.scales, zeros=qw.zeros,
                                dtype="uint3", group_size=64, shape=(K, N))
    assert rebuilt.dtype == dtypes.uint3
    np.testing.assert_array_equal(to_numpy(rebuilt.dequantize()), to_numpy(qw.dequantize()))
    with pytest.raises(AttributeError):
        qw.group_size = 32  # frozen


def test_quantized_weight_rejects_inconsistent_pieces() -> None:
    qw = W.quantize(np.random.default_rng(0).standard_normal((64, 16)), "int4", 32)
    base = dict(packed=qw.packed, scales=qw.scales, zeros=None, dtype=dtypes.int4,
                group_size=32, shape=(64, 16))
    for change, message in [
        (dict(shape=(64, 24)), "packed must be"),
        (dict(group_size=64), "scales must be"),
        (dict(group_size=48), "multiple of group_size"),
        (dict(dtype="int5"), "packed must be"),
        (dict(scales=qw.scales.astype(np.float32)), "f16 or bf16"),
        (dict(zeros=qw.scales.view(np.uint16)), "scale dtype"),
        (dict(format="tiled"), "unknown weight format"),
    ]:
        with pytest.raises((ValueError, TypeError), match=message):
            W.QuantizedWeight(**{**base, **change})


# ---- errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("lib", LIBS)
def test_quantize_errors(lib: str) -> None:
    w = np.random.default_rng(0).standard_normal((128, 16))
    cases = [
        (lambda: W.quantize(to_lib(w[0], lib), "int4"), ValueError, "2-D"),
        (lambda: W.quantize(to_lib(w.reshape(2, 64, 16), lib), "int4"), ValueError, "2-D"),
        (lambda: W.quantize(to_lib(w[:96], lib), "int4", 64), ValueError,
         r"K \(96\) must be a multiple of group_size \(64\)"),
        (lambda: W.quantize(to_lib(w[:, :12], lib), "int4"), ValueError, "multiple of 8"),
        (lambda: W.quantize(to_lib(w.astype(np.int32), lib), "int4"), TypeError,
         "floating point"),
        (lambda: W.quantize(to_lib(w, lib), "int9"), DTypeError, "unknown data type"),
        (lambda: W.quantize(to_lib(w, lib), "f5e2m3"), DTypeError, "not 5"),
        (lambda: W.quantize(to_lib(w, lib), "f16"), ValueError, "1..8-bit"),
        (lambda: W.quantize(to_lib(w, lib), "int4", 48), ValueError, "group_size must be"),
        (lambda: W.quantize(to_lib(w, lib), "int4", 32.0), TypeError, "integer"),
        (lambda: W.quantize(to_lib(w, lib), "int4", zero_point=True), ValueError,
         "unsigned"),
        (lambda: W.quantize(to_lib(w, lib), "int4", scale_dtype="f32"), ValueError,
         "f16 or bf16"),
        (lambda: W.quantize(to_lib(w * 1e6, lib), "f4e2m1"), ValueError, "exceeds"),
        (lambda: W.quantize(to_lib(np.where(w > 2, np.nan, w), lib), "int4"), ValueError,
         "finite"),
        (lambda: W.quantize(to_lib(np.where(w > 2, np.inf, w), lib), "int4"), ValueError,
         "finite"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    assert issubclass(DTypeError, ValueError)


@pytest.mark.parametrize("lib", LIBS)
def test_pack_errors(lib: str) -> None:
    codes = np.zeros((4, 16), dtype=np.uint8)
    with pytest.raises(ValueError, match="0..7"):
        F.pack_weights(to_lib(codes + 8, lib), "int3")
    with pytest.raises(TypeError, match="integers"):
        F.pack_weights(to_lib(codes.astype(np.float32), lib), "int3")
    with pytest.raises(ValueError, match="multiple of 8"):
        F.pack_weights(to_lib(codes[:, :12], lib), "int3")
    with pytest.raises(ValueError, match="2-D"):
        F.pack_weights(to_lib(codes[0], lib), "int3")
    with pytest.raises(ValueError, match="unknown weight format"):
        F.pack_weights(to_lib(codes, lib), "int3", format="tiled")
    with pytest.raises(ValueError, match="multiple of 3 bytes"):
        F.unpack_weights(to_lib(codes[:, :4], lib), "int3")
    with pytest.raises(TypeError, match="uint8"):
        F.unpack_weights(to_lib(codes.astype(np.int32), lib), "int4")
    with pytest.raises(ValueError, match="1..8-bit"):
        F.unpack_weights(to_lib(codes, lib), "int16")


def test_torch_is_not_imported() -> None:
    code = "import sys, tilevm.kernels.weights; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- GPU ---------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("t", [dtypes.int4, dtypes.uint4, dtypes.int3, dtypes.f4e2m1,
                               dtypes.f6e3m2, dtypes.f8e4m3], ids=ids)
def test_gpu_quantize_matches_reference(t: DataType) -> None:
    cuda_torch()
    w = weights(np.random.default_rng(3), 256, 64)
    qw = check_against_reference(w, t, 128, "torch", device="cuda")
    assert qw.packed.is_cuda and qw.scales.is_cuda and qw.dequantize().is_cuda
    if t.kind is Kind.UNSIGNED:
        check_against_reference(w, t, 64, "torch", zero_point=True, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("bits", range(1, 9))
def test_gpu_pack_large(bits: int) -> None:
    torch = cuda_torch()
    codes = torch.randint(0, 1 << bits, (4096, 4096), dtype=torch.uint8, device="cuda")
    t = dtypes.parse(f"uint{bits}")
    packed = F.pack_weights(codes, t)
    assert packed.is_cuda
    expected = F.pack_weights(codes.cpu().numpy(), t)
    np.testing.assert_array_equal(packed.cpu().numpy(), expected)
    np.testing.assert_array_equal(packed[:3].cpu().numpy(),
                                  ref_pack_rows(codes[:3].cpu().numpy(), bits))
    assert torch.equal(F.unpack_weights(packed, t), codes)
