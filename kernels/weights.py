"""The weight path of the quantized-matmul kernels: quantize float weights into codes and
scales (`quantize`, `encode`), hold them (`QuantizedWeight`, packed in a weight format of
`kernels.weight_format`), and dequantize back.

Everything here works on numpy arrays and on torch tensors (CPU or CUDA) alike: results
stay in the input's library and on its device. torch is optional and is imported only
when a torch tensor is passed in (never at module import).

Quantization (`quantize`)
-------------------------
Weights `w[K, N]` are quantized in groups of `group_size` consecutive rows of K, one
scale (and optionally one zero point) per group and column, i.e. `scales[K/g, N]`.
`group_size` is 32, 64, 128 or K (per-channel; -1 means K). All arithmetic is float64
(torch tensors too), so numpy and torch give the same codes bit for bit:

- **symmetric** (signed int and float formats, and unsigned ints without zero point):
  `scale = round_s(amax / qmax)`, `amax = max |w|` over the group, `qmax = dtype.max`
  (1 for int1, whose max is 0: int1 holds {-1, 0}); `code = encode(w / scale)`;
  `W = decode(code) * scale`. Unsigned formats without zero point hold only weights
  >= 0: negative weights saturate to code 0 (as in examples/quantized_matmul.py).
- **asymmetric** (`zero_point=True`, unsigned ints only), with `L = 2^b - 1`:
  `lo = min(0, min w)`, `hi = max(0, max w)` over the group (the range always holds 0,
  so 0.0 is exactly representable and `zero` stays in [0, L]);
  `scale = round_s((hi - lo) / L)`;
  `zero = clip(round_half_even(-lo / scale), 0, L)` (with the rounded scale), an integer;
  `code = encode(w / scale + zero)`; `W = (decode(code) - zero) * scale`.
  The group minimum maps to code 0 (`lo / scale + zero` lies in [-1/2, 1/2]).
  Zero points are stored in the scale dtype; being integers <= 255 they are exact in
  both f16 and bf16.

`round_s` rounds to the scale dtype (f16 by default, bf16 for a bfloat16 torch input,
or `scale_dtype`), to nearest even. A group of zeros gets scale 1.0, a scale that
rounds to 0 gets the scale dtype's smallest positive value (never a zero scale), and a
scale beyond the scale dtype's range is a `ValueError`. `encode` is `encode` below
(identical to `tilevm.dtypes.encode`: round to nearest, ties to the even code, signed
zeros kept), applied after clipping the scaled value to `[dtype.min, dtype.max]`, so no
NaN or inf code is ever produced (not even for f8e5m2, whose `encode` would overflow to
inf). Non-finite weights are a `ValueError`.

Weight formats
--------------
`QuantizedWeight.format` names how the codes are laid out in `packed`: "row_packed" or
"fragments" (what the kernels read), both defined in `kernels.weight_format` with
`pack_weights` and `unpack_weights`.

On numpy, bf16 scales and zeros are stored as their uint16 bit patterns (numpy has no
bfloat16; this is `tilevm.dtypes.host_dtype("bf16")`, the project's host convention).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from tilevm import dtypes
from tilevm.dtypes import DataType, DTypeError, Kind
from tilevm.kernels.arrays import (
    Array,
    NumpyOps,
    TorchOps,
    array_ops,
    first_true,
    is_float_array,
    is_torch,
    nbytes,
)
from tilevm.kernels.weight_format import (
    ATOM,
    FRAGMENTS,
    ROW_PACKED,
    WeightFormat,
    check_format,
    code_type,
    pack_weights,
    padded_n,
    unpack_weights,
)

__all__ = ["GROUP_SIZES", "QuantizedWeight", "dequantize", "encode", "quantize"]

GROUP_SIZES: tuple[int, ...] = (32, 64, 128)  # besides K (per-channel, also spelled -1)
SCALE_DTYPES: tuple[DataType, ...] = (dtypes.f16, dtypes.bf16)


# ---- encode: nearest representable value, for numpy and torch ---------------------------

@dataclass(frozen=True)
class _CodeTable:
    """The representable values of a format, sorted, with their codes.

    Integers: every value. Floats: the magnitudes of the non-negative codes (codes
    `0 .. 2^(b-1) - 1` enumerate magnitudes in increasing order), NaN codes left out and
    the inf code (IEEE-like formats) placed at `2^(max_exponent + 1)`, where the next
    binade would start: round to nearest then overflows to inf exactly as `dtypes.encode`
    does. The sign of a float is applied afterwards with the sign bit.
    """

    values: np.ndarray  # float64, strictly increasing
    codes: np.ndarray  # int64


@functools.cache
def _code_table(dtype: DataType) -> _CodeTable:
    count = dtype.num_codes >> (1 if dtype.is_float else 0)
    codes = np.arange(count, dtype=np.int64)
    values = dtypes.decode(codes, dtype)
    values = np.where(np.isposinf(values), 2.0 ** (dtype.max_exponent + 1), values)
    keep = ~np.isnan(values)
    values, codes = values[keep], codes[keep]
    order = np.argsort(values, kind="stable")
    values, codes = values[order], codes[order]
    assert np.all(np.diff(values) > 0), dtype
    values.flags.writeable = False
    codes.flags.writeable = False
    return _CodeTable(values, codes)


@functools.cache
def _value_table(dtype: DataType) -> np.ndarray:
    """`decode` of every code, indexed by code (float64)."""
    table = dtypes.decode(np.arange(dtype.num_codes, dtype=np.int64), dtype)
    table.flags.writeable = False
    return table


def encode(values: Array, dtype: DataType | str) -> Array:
    """The code of each value in `dtype`, identical to `tilevm.dtypes.encode` (round to
    nearest, ties to the even code, saturation or IEEE overflow, signed zeros, NaN to the
    format's NaN code or a `DTypeError`), for numpy arrays and torch tensors alike.

    Why a second implementation: `dtypes.encode` is numpy-only; this one is a single
    routine for every format of up to 16 bits, driven only by the format's value table
    (`decode` of every code): each value is located among the sorted representable
    values by binary search and goes to the nearer neighbour, or on an exact tie to the
    neighbour with the even code. The comparison is against the midpoint of the two
    neighbours, which is exact in float64. Computed in float64 on the input's device.

    Returns uint8 codes for formats of up to 8 bits (numpy: `dtype.code_dtype`; torch:
    int32 for wider formats).
    """
    dtype = dtypes.parse(dtype)
    if dtype.bits > 16:
        raise DTypeError(f"encode handles formats of up to 16 bits, not {dtype}")
    if not is_torch(values):
        values = np.asarray(values)
        if values.dtype.kind not in "biuf":
            raise DTypeError(f"cannot encode values of numpy dtype {values.dtype} as {dtype}")
    xp = array_ops(values)
    x = xp.float64(values)
    nan = xp.isnan(x)
    any_nan = xp.any(nan)
    if any_nan and not dtype.has_nan:
        raise DTypeError(f"{dtype} has no NaN; the input holds NaN")

    table = _code_table(dtype)
    if dtype.is_float:
        negative = xp.signbit(x)
        v = xp.abs(x)
        if any_nan:
            v = xp.where(nan, 0.0, v)
    else:
        v = x
    v = xp.clip(v, float(table.values[0]), float(table.values[-1]))
    tv, tc = xp.const(table.values, x), xp.const(table.codes, x)
    hi_index = xp.clip(xp.searchsorted(tv, v), 1, len(table.values) - 1)
    lo_value, hi_value = tv[hi_index - 1], tv[hi_index]
    lo_code, hi_code = tc[hi_index - 1], tc[hi_index]
    mid = (lo_value + hi_value) * 0.5
    up = (v > mid) | ((v == mid) & (hi_code % 2 == 0))
    code = xp.where(up, hi_code, lo_code)
    if dtype.is_float:
        code = xp.where(negative, code | (1 << (dtype.bits - 1)), code)
        if any_nan:
            code = xp.where(nan, dtype.nan_code, code)
    if xp.is_torch:
        return code.to(xp.t.uint8 if dtype.bits <= 8 else xp.t.int32)
    return code.astype(dtype.code_dtype)


def _decode(codes: Array, dtype: DataType, *, float32: bool = False) -> Array:
    """Values of codes by table lookup: float64 (numpy), or float32/float64 (torch)."""
    xp = array_ops(codes)
    table = _value_table(dtype)
    if xp.is_torch:
        t = xp.const(table, codes)
        return (t.float() if float32 else t)[codes.long()]
    return table[np.asarray(codes).astype(np.int64)]


# ---- QuantizedWeight ------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class QuantizedWeight:
    """A quantized weight matrix `W[K, N]`, everything a quantized-matmul kernel reads.

    - `packed`: uint8, the codes in `format` (`kernels.weight_format`): `[K, N*b/8]`
      row-packed (N a multiple of 8), `[K/32, Np*4b]` in fragments, where N is padded
      to `Np = padded_n(N)` (any N; K a multiple of 32);
    - `scales`: `[K/group_size, Np]` in f16 or bf16 (on numpy, bf16 is stored as uint16
      bit patterns; Np = N row-packed, the padding columns' scales are ones);
    - `zeros`: None (symmetric), or `[K/group_size, Np]` zero points in the scale dtype:
      `W = (decode(code) - zero) * scale`;
    - `dtype`: the `DataType` of the codes (1..8 bits; a name is parsed);
      `group_size`: rows of K per scale (== K for per-channel; -1 is normalized to K);
      `shape`: (K, N); `format`: the weight format's name.

    All arrays are of one library (numpy, or torch on one device). Not hashable and
    compared by identity (it holds arrays). Construction checks every field (see
    `__post_init__`): packed uint8 of the format's shape, scales finite and positive,
    zeros (unsigned formats only) integers in 0..2^b - 1; a bad one is a `TypeError` or
    `ValueError` naming it.
    """

    packed: Array
    scales: Array
    zeros: Array | None
    dtype: DataType
    group_size: int
    shape: tuple[int, int]
    format: WeightFormat = ROW_PACKED

    def __post_init__(self) -> None:
        # Every field is checked once, here: `quantized_matmul` reads them per call
        # unchecked, and a NaN scale or an out-of-range zero point gives wrong numbers, not
        # an error, in the kernel.
        check_format(self.format)
        object.__setattr__(self, "dtype", code_type(self.dtype))
        K, N = _shape(self.shape)
        object.__setattr__(self, "shape", (K, N))
        object.__setattr__(self, "group_size", _stored_group_size(self.group_size, K))
        self._check_arrays()
        self._check_packed()
        self._check_scales_and_zeros()

    def _check_arrays(self) -> None:
        """One library (numpy, or torch on one device) for every array."""
        arrays = {"packed": self.packed, "scales": self.scales}
        if self.zeros is not None:
            arrays["zeros"] = self.zeros
        for name, a in arrays.items():
            if not (isinstance(a, np.ndarray) or is_torch(a)):
                raise TypeError(f"{name} must be a numpy array or a torch tensor, "
                                f"got {type(a).__name__}")
        if len({is_torch(a) for a in arrays.values()}) != 1:
            raise TypeError("packed, scales and zeros must all be numpy arrays or all "
                            "torch tensors")
        if is_torch(self.packed) and len({str(a.device) for a in arrays.values()}) != 1:
            raise ValueError("packed, scales and zeros must be on one device")

    def _check_packed(self) -> None:
        K, N = self.shape
        b = self.dtype.bits
        if str(self.packed.dtype) not in ("uint8", "torch.uint8"):
            raise TypeError(f"packed must be uint8 bytes of packed codes, got {self.packed.dtype}")
        if self.format == FRAGMENTS:
            Np = padded_n(N)
            if K % ATOM or tuple(self.packed.shape) != (K // ATOM, Np * 4 * b):
                raise ValueError(f"packed must be [K/32, Np*4b] = [{K / ATOM:g}, {Np * 4 * b}] "
                                 f"(K a multiple of 32), got {tuple(self.packed.shape)}")
        elif tuple(self.packed.shape) != (K, N * b // 8) or N % 8:
            raise ValueError(f"packed must be [K, N*b/8] = [{K}, {N * b / 8:g}] "
                             f"(N a multiple of 8), got {tuple(self.packed.shape)}")

    def _check_scales_and_zeros(self) -> None:
        """Shapes and storage types, then the values: scales finite and positive, zero
        points integers in the codes' range 0..2^b - 1 (padding columns included)."""
        K, N = self.shape
        g = self.group_size
        Ns = padded_n(N, self.format)
        for name in ("scales", "zeros"):
            a = getattr(self, name)
            if a is not None and tuple(a.shape) != (K // g, Ns):
                raise ValueError(f"{name} must be [K/group_size, {Ns}] = [{K // g}, {Ns}], "
                                 f"got {tuple(a.shape)}")
        sdt = self.scale_dtype  # validates the scales' element type
        scales = _stored_values(self.scales)
        xp = array_ops(scales)
        _reject_where(~(xp.isfinite(scales) & (scales > 0)), scales, "scales",
                      "finite and positive")
        if self.zeros is None:
            return
        if _storage_dtype(self.zeros) != sdt:
            raise ValueError(f"zeros must be stored in the scale dtype {sdt}")
        if self.dtype.kind is not Kind.UNSIGNED:
            raise ValueError(f"zero points are for unsigned int formats; {self.dtype} is "
                             f"symmetric (zeros must be None)")
        zeros = _stored_values(self.zeros)
        top = (1 << self.dtype.bits) - 1
        in_range = (zeros == xp.rint(zeros)) & (zeros >= 0) & (zeros <= top)
        _reject_where(~in_range, zeros, "zeros", f"integers in {self.dtype}'s code "
                      f"range 0..{top}")

    @property
    def scale_dtype(self) -> DataType:
        """f16 or bf16: the type of `scales` (and `zeros`)."""
        return _storage_dtype(self.scales)

    @property
    def nbytes(self) -> int:
        """Bytes of packed codes, scales and zero points together."""
        return sum(nbytes(a) for a in (self.packed, self.scales, self.zeros) if a is not None)

    def codes(self) -> Array:
        """The codes `[K, N]` (uint8), unpacked, on the arrays' library and device (the
        format's padding columns dropped)."""
        return unpack_weights(self.packed, self.dtype, self.format)[:, :self.shape[1]]

    def dequantize(self) -> Array:
        """The weights `W[K, N]` these codes, scales and zero points denote: float64 on
        numpy; float32 on torch, on the tensors' device (exact: every low-bit value times
        an f16/bf16 scale fits in float32's 24-bit significand)."""
        torch_ = is_torch(self.packed)
        K, N = self.shape
        g = self.group_size
        values = _decode(self.codes(), self.dtype, float32=torch_).reshape(K // g, g, N)
        scales = _stored_values(self.scales, float32=torch_)[:, None, :N]
        if self.zeros is not None:
            values = values - _stored_values(self.zeros, float32=torch_)[:, None, :N]
        return (values * scales).reshape(K, N)


def dequantize(qw: QuantizedWeight) -> Array:
    """`qw.dequantize()`: float32 on torch (same device), float64 on numpy."""
    return qw.dequantize()


# ---- field checks ------------------------------------------------------------------------

def _shape(shape: object) -> tuple[int, int]:
    if not (isinstance(shape, (tuple, list)) and len(shape) == 2
            and all(_is_int(s) and s > 0 for s in shape)):
        raise ValueError(f"shape must be (K, N), two positive integers, got {shape!r}")
    return int(shape[0]), int(shape[1])


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _stored_group_size(group_size: object, K: int) -> int:
    """`group_size` as stored: -1 means K; else a positive integer that divides K."""
    if not _is_int(group_size):
        raise TypeError(f"group_size must be an integer, got {group_size!r}")
    g = K if group_size == -1 else int(group_size)  # type: ignore[call-overload]
    if g <= 0 or K % g:
        raise ValueError(f"group_size must be -1 (per-channel) or a positive divisor of K; "
                         f"K ({K}) must be a multiple of group_size ({group_size})")
    return g


def _reject_where(bad: Array, values: Array, name: str, requirement: str) -> None:
    """A ValueError naming the first element of `name` where `bad` holds."""
    index = first_true(bad)
    if index is not None:
        value = float(values[index])
        raise ValueError(f"{name} must be {requirement}; {name}[{', '.join(map(str, index))}]"
                         f" is {value:g}")


# ---- scale storage -----------------------------------------------------------------------

def _storage_dtype(a: Array) -> DataType:
    name = str(a.dtype)
    kinds = {"float16": dtypes.f16, "torch.float16": dtypes.f16,
             "torch.bfloat16": dtypes.bf16, "uint16": dtypes.bf16}
    if name not in kinds:
        raise TypeError(f"scales and zeros must be f16 or bf16 (numpy: float16, or uint16 "
                        f"bf16 bit patterns), got {a.dtype}")
    return kinds[name]


def _stored_values(a: Array, *, float32: bool = False) -> Array:
    """Scales or zeros as float64 (numpy) or float32 (torch), exactly."""
    if is_torch(a):
        return a.float() if float32 else a.double()
    if a.dtype == np.uint16:
        return dtypes.decode(a, dtypes.bf16)
    return a.astype(np.float64)


def _store(values: Array, sdt: DataType) -> Array:
    """float64 values that are exact in `sdt` -> the storage array (see the module doc)."""
    if is_torch(values):
        import torch

        return values.to(torch.float16 if sdt == dtypes.f16 else torch.bfloat16)
    if sdt == dtypes.f16:
        return values.astype(np.float16)
    return encode(values, sdt).astype(np.uint16)


def _scale_type(scale_dtype: object, w: Array) -> DataType:
    if scale_dtype is None:
        return dtypes.bf16 if str(w.dtype) == "torch.bfloat16" else dtypes.f16
    if isinstance(scale_dtype, (str, DataType)):
        sdt = dtypes.parse(scale_dtype)
    else:  # a numpy or torch dtype
        names = {"torch.float16": "f16", "torch.bfloat16": "bf16", "float16": "f16"}
        name = str(scale_dtype if str(scale_dtype).startswith("torch.")
                   else np.dtype(scale_dtype))  # type: ignore[call-overload]
        sdt = dtypes.parse(names.get(name, name))
    if sdt not in SCALE_DTYPES:
        raise ValueError(f"scale_dtype must be f16 or bf16, got {sdt}")
    return sdt


def _round_scales(xp: NumpyOps | TorchOps, ratio: Array, sdt: DataType) -> Array:
    """`ratio` (float64, >= 0) rounded to `sdt`, as exact float64 values: 0 -> 1.0, a
    positive value that rounds to 0 -> the smallest positive `sdt` value."""
    ratio = xp.where(ratio > 0, ratio, 1.0)
    scale = _decode(encode(ratio, sdt), sdt)
    if not xp.any(~xp.isfinite(scale)):
        return xp.where(scale > 0, scale, sdt.smallest_subnormal)
    worst = float(ratio.max())
    raise ValueError(f"a group's scale ({worst:.6g}) exceeds the largest {sdt} value "
                     f"({sdt.max:g}); use scale_dtype='bf16' or rescale the weights")


# ---- quantize --------------------------------------------------------------------------------

def _group_size(group_size: int, K: int) -> int:
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)):
        raise TypeError(f"group_size must be an integer, got {group_size!r}")
    g = K if group_size == -1 else int(group_size)
    if g != K and g not in GROUP_SIZES:
        raise ValueError(f"group_size must be one of {', '.join(map(str, GROUP_SIZES))}, "
                         f"K ({K}, per-channel) or -1 (per-channel), got {group_size}")
    if K % g:
        raise ValueError(f"K ({K}) must be a multiple of group_size ({g})")
    return g


def quantize(w: Array, dtype: DataType | str, group_size: int = 128, *,
             zero_point: bool = False, scale_dtype: object = None,
             format: WeightFormat = ROW_PACKED) -> QuantizedWeight:
    """Quantize float weights `w[K, N]` (numpy array or torch tensor, CPU or CUDA) to
    `dtype` codes with per-group scales (groups of `group_size` rows of K; -1 or K:
    per-channel), round to nearest even: the formulas are in the module doc. The result
    lives in `w`'s library and on its device.

    `zero_point=True` (unsigned int formats only) adds an integer zero point per group
    (asymmetric). `scale_dtype` is "f16" or "bf16" (or the numpy/torch dtype); None
    means bf16 for a bfloat16 torch tensor and f16 otherwise.

    The "fragments" format (what the kernels read) takes any N >= 1 (it pads N to whole
    atoms, `padded_n`) and any K that is a multiple of the group size (of 32, too, when
    the group is the whole of K: per-channel); "row_packed" needs N a multiple of 8.

    Raises `TypeError` for a non-float `w`, `ValueError` for a non-2-D or empty `w`, N not
    a multiple of 8 ("row_packed"), an unsupported group size or K not a multiple of it
    (per-channel "fragments": of 32), non-finite weights, a zero point on a non-unsigned
    format, or a scale beyond the scale dtype's range; `DTypeError` (a `ValueError`) for
    an unknown `dtype`.
    """
    dtype = code_type(dtype)
    w = w.detach() if is_torch(w) else np.asarray(w)  # no autograd graph in the result
    if not is_float_array(w) or "complex" in str(w.dtype):
        raise TypeError(f"weights must be floating point, got {w.dtype}")
    if len(w.shape) != 2:
        raise ValueError(f"weights must be a 2-D [K, N] array, got shape {tuple(w.shape)}")
    K, N = (int(s) for s in w.shape)
    if K == 0 or N == 0:
        raise ValueError(f"weights must not be empty, got shape {(K, N)}")
    check_format(format)
    if format == ROW_PACKED and N % 8:
        raise ValueError(f"the row_packed format needs N a multiple of 8 (each group of 8 "
                         f"codes is b whole bytes of a row), got N = {N}; "
                         f"format='fragments' takes any N")
    g = _group_size(group_size, K)
    if format == FRAGMENTS and K % ATOM:  # (only per-channel: every group size divides)
        raise ValueError(f"the fragments format needs K a multiple of {ATOM} (its atoms "
                         f"are {ATOM} rows of K), got K = {K} (per-channel)")
    if zero_point and dtype.kind is not Kind.UNSIGNED:
        raise ValueError(f"zero points are for unsigned int formats; {dtype} is symmetric")
    sdt = _scale_type(scale_dtype, w)

    xp = array_ops(w)
    x = xp.float64(w)
    if xp.any(~xp.isfinite(x)):
        raise ValueError("weights must be finite (found NaN or inf)")
    groups = x.reshape(K // g, g, N)
    if zero_point:
        levels = float((1 << dtype.bits) - 1)
        lo = xp.minimum(xp.amin(groups, 1), 0.0)
        hi = xp.maximum(xp.amax(groups, 1), 0.0)
        scale = _round_scales(xp, (hi - lo) / levels, sdt)
        zero = xp.clip(xp.rint(-lo / scale), 0.0, levels)
        scaled = groups / scale[:, None, :] + zero[:, None, :]
    else:
        qmax = dtype.max if dtype.max > 0 else -dtype.min  # int1 holds {-1, 0}
        scale = _round_scales(xp, xp.amax(xp.abs(groups), 1) / qmax, sdt)
        zero = None
        scaled = groups / scale[:, None, :]
    scaled = xp.clip(scaled, dtype.min, dtype.max)  # saturate; never an inf code
    codes = encode(scaled.reshape(K, N), dtype)
    pad = padded_n(N, format) - N
    if pad:  # zero codes, unit scales, zero zero points: the format's padded columns
        codes = _pad_columns(xp, codes, pad, 0)
        scale = _pad_columns(xp, scale, pad, 1.0)
        zero = None if zero is None else _pad_columns(xp, zero, pad, 0.0)
    return QuantizedWeight(
        packed=pack_weights(codes, dtype, format), scales=_store(scale, sdt),
        zeros=None if zero is None else _store(zero, sdt), dtype=dtype, group_size=g,
        shape=(K, N), format=format)


def _pad_columns(xp: NumpyOps | TorchOps, a: Array, count: int, value: float) -> Array:
    filler = xp.const(np.full((a.shape[0], count), value), a).to(a.dtype) if xp.is_torch \
        else np.full((a.shape[0], count), value, dtype=a.dtype)
    return xp.t.cat([a, filler], 1) if xp.is_torch else np.concatenate([a, filler], 1)

