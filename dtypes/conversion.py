"""The generic conversion rules, low-bit codes -> f16 / bf16 / f32, as data and math.

Which bits go where, which pairs are exact, and how codes pair into 16-bit lanes;
`tilevm.backend.llvm.conversion` emits these rules as LLVM IR (for the CPU JIT and the
GPU alike), and the quantized weight format reads the pairing (`lane_pairs`).

Every 1..8-bit type (`int1`..`int8`, `uint1`..`uint8`, every `f{b}e{E}m{M}`) converts to
`f16`, `bf16` and `f32` by ONE rule per kind, computed from the type's fields (bits,
exponent and mantissa widths, bias, specials); there is no per-type table. A rule is a
few integer operations that move the code's bits into the target's fields, then ONE
floating-point operation that fixes the value:

* **integers** (the magic-number trick). Let `T` be the target's mantissa width and
  `magic = 2^T`: its ulp is 1, so the float whose bits are `bits(magic) | u` (u < 2^T)
  is exactly `magic + u`. For a signed code, first flip its sign bit, `u = code ^
  2^(b-1)`; that is the code plus `2^(b-1)` (the offset). Then one subtraction
  `x - (magic + offset)` gives the value exactly (the result is a small integer, which
  every target holds, so the subtraction does not round).
  When the code has one bit more than the mantissa (b = T + 1: 8-bit codes into bf16,
  T = 7), the top bit `h` of `u` cannot go into `x`; it goes into the subtrahend
  instead, which stays a float built with integer ops: `y = magic + offset - 2^T*h`.
  Its bits are `bits(magic + offset) - h * D`, `D = bits(magic + offset) -
  bits(magic + offset - 2^T)` (both are positive floats, whose bit patterns order like
  their values). For b <= T, h is 0 and y is the constant `magic + offset`: one rule.

* **floats** (exponent re-bias by multiplication). A source code `s|e|m` (E exponent,
  M mantissa bits) becomes the target bit pattern `s|e|m0..0`: the sign moves to the
  target's sign bit, the exponent field is placed *as is* in the low bits of the
  target's exponent field, the mantissa is left-aligned in the target's mantissa.
  Read in the target's encoding, that pattern is exactly `value * 2^(src_bias -
  dst_bias)`, and one multiplication by `2^(dst_bias - src_bias)` restores the value.
  Why this holds for every code, subnormals included: both formats use the same
  piecewise formula, `(1 + m/2^M) * 2^(e - bias)` for `e >= 1` and `(m/2^M) *
  2^(1 - bias)` for `e = 0` (a subnormal's scale is that of exponent field 1). Moving
  the fields keeps `e` and the fraction `m/2^M` and swaps the bias, so in both branches
  the target pattern is the source value times `2^(src_bias - dst_bias)`. A source
  subnormal thus becomes a target *subnormal* pattern (e = 0) and the multiplication
  turns it into whatever the exact value is in the target, normal or subnormal: the
  product is exact because the true result is representable (an IEEE operation
  rounds only when the exact result is not). Zeros are the e = m = 0 pattern, +0 or
  -0 by the moved sign, and stay zeros of the same sign.
  Specials: an IEEE-like source (f8e5m2) has inf/NaN at exponent field all ones, an
  FN source (f8e4m3) has NaN at exponent and mantissa all ones. For those codes an
  integer select ORs the target's all-ones exponent into the pattern: a zero mantissa
  (IEEE inf) gives inf, a non-zero one gives NaN, and `inf * 2^k = inf`,
  `NaN * 2^k = NaN`. When the source has as many exponent bits as the target
  (f8e5m2 -> f16) the field is already all ones and the biases are equal: no select
  and no multiplication at all. Finite-only formats have no specials and no select.

Exactness (`is_exact`, read from dtypes): a pair (src, dst) is exact iff every value of
src is a value of dst: for integers `max |value| <= 2^(T+1)`; for floats `M <= T`,
`src.max <= dst.max` and `src.smallest_subnormal >= dst.smallest_subnormal` (all
values are then multiples of dst's quantum below 2^(dst emin), with at most T+1
significant bits above). Every 1..8-bit type is exact into f32 and bf16. Into f16 all
integers, every float with E <= 4, and f8e5m2 are exact; f6e5m0, f7e5m1 (finite E=5
formats reach 65536 > 65504), f7e6m0, f8e6m1 and f8e7m0 are not. Those inexact pairs
raise `UnsupportedConversion`, unless `allow_rounding=True`: then the value is made
exactly in f32 by the float rule and rounded to the target by one `fptrunc` (round to
nearest even, overflow to inf, underflow to 0 / subnormals) - a second float op.

The API: `conversion_rule(src, dst)` gives the rule's constants (computed once per
pair), `is_exact(src, dst)` the exactness test above, `max_pair_offset` and
`takes_exponent` what the paired form takes, `lane_pairs` which codes of a packed
register convert together, and `pairs_convert` whether a conversion goes two codes at a
time.

The other direction, f32 -> a 1..8-bit float code, is `dtypes.encode`'s rounding as a
few integer operations on the f32's bits (`EncodeRule`, `encode_rule(dst)`). The codes
of a format enumerate its magnitudes in increasing order, so for a value in dst's
normal range (|x| >= 2^emin) re-biasing the f32 pattern, `|bits| - (127 - bias) <<
23`, gives `code << (23 - M)` plus the bits below the code: an integer round to
nearest even of that shift is the code (a carry out of the mantissa is the next
binade's first code, and for M = 0 the even code is the even exponent field, as
`encode` rounds). Below 2^emin the code is `|x| / 2^(emin - M)` (a subnormal's
quantum), rounded to nearest even: `|x| * 2^(M - emin) + 2^23` in f32 rounds it (the
product is exact, a power-of-two scaling), and the float's low bits are the code
(2^M there is the smallest normal, the right code again). Then the magnitude code is
capped at `max_code` (finite formats saturate at +-max; an IEEE format's cap is its
inf code, where values at or beyond max + ulp/2 round to), the sign bit is put back
(-0.0 keeps its sign), and a NaN gives `nan_code` where the format has one.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from tilevm.dtypes.datatype import DataType, Kind, Specials, parse

__all__ = [
    "ConversionRule", "EncodeRule", "UnsupportedConversion", "TARGETS", "as_source",
    "as_target", "conversion_rule", "encode_rule", "float_bits", "is_exact", "lane_pairs",
    "max_pair_offset", "pairs_convert", "takes_exponent",
]


class UnsupportedConversion(ValueError):
    """A conversion no rule serves (or that would round, without `allow_rounding`)."""


TARGETS = ("f16", "bf16", "f32")


def as_target(dst: DataType | str) -> DataType:
    """`dst` as a conversion target (f16, bf16, f32), else `UnsupportedConversion`."""
    dst = parse(dst)
    if dst.name not in TARGETS:
        raise UnsupportedConversion(f"conversion targets are {', '.join(TARGETS)}, not {dst}")
    return dst


def as_source(src: DataType | str) -> DataType:
    """`src` as a conversion source (a 1..8-bit type), else `UnsupportedConversion`."""
    src = parse(src)
    if not src.is_lowbit:
        raise UnsupportedConversion(f"the conversion rules read 1..8-bit codes, not {src}")
    return src


def is_exact(src: DataType | str, dst: DataType | str) -> bool:
    """Whether every value of `src` is a value of `dst` (read from the dtypes' ranges)."""
    src, dst = as_source(src), as_target(dst)
    if src.is_integer:
        # dst holds every integer of magnitude <= 2^(T+1) (T+1 significant bits).
        return max(abs(src.min_exact), src.max_exact) <= 2 ** (dst.mantissa_bits + 1)
    return (src.mantissa_bits <= dst.mantissa_bits
            and src.max_exact <= dst.max_exact
            and src.smallest_subnormal_exact >= dst.smallest_subnormal_exact)


@dataclass(frozen=True)
class ConversionRule:
    """The constants of the rule converting `src` codes to `dst`, per lane of dst's width.

    Integer rule: `u = code ^ flip`; `x = bits(magic) | (u & low_mask)`;
    `y = y_bits - ((u >> T) & 1) * y_step` (only when `y_step`, else y is the constant
    `y_bits`); value = `float(x) - float(y)`.
    Float rule: `x = ((code << sign_shift) & sign_mask) | ((code << field_shift) &
    field_mask)`; if `code & special_mask == special_mask` (when special_mask) then
    `x |= special_fill`; value = `float(x) * 2^scale_exponent` (no op when 0).
    `via_f32`: inexact pair, made in f32 then rounded to dst by `fptrunc`.
    """

    src: DataType
    dst: DataType
    exact: bool
    via_f32: bool = False
    # integer rule
    flip: int = 0
    low_mask: int = 0
    magic_bits: int = 0
    y_bits: int = 0
    y_value: float = 0.0
    y_step: int = 0
    # float rule
    sign_shift: int = 0
    sign_mask: int = 0
    field_shift: int = 0
    field_mask: int = 0
    special_mask: int = 0
    special_fill: int = 0
    scale_exponent: int = 0

    @property
    def float_ops(self) -> int:
        """Floating-point operations per converted value (per pair in the paired form)."""
        ops = 1 if self.src.is_integer or self.scale_exponent else 0
        return ops + (1 if self.via_f32 else 0)


def float_bits(value: float, dst: DataType) -> int:
    """The bit pattern of `value` in dst (exact values only)."""
    bits32 = struct.unpack("<I", struct.pack("<f", value))[0]
    if dst.bits == 32:
        return bits32
    if dst.name == "bf16":
        assert bits32 & 0xFFFF == 0, value
        return bits32 >> 16
    half = np.float16(value)
    assert float(half) == value, value
    return int(half.view(np.uint16))


@functools.cache
def conversion_rule(src: DataType | str, dst: DataType | str, *,
                    allow_rounding: bool = False) -> ConversionRule:
    """The rule for (src, dst); `UnsupportedConversion` if it would round (see the module).
    Computed once per pair (the rule is frozen), however many casts and emitters ask."""
    src, dst = as_source(src), as_target(dst)
    exact = is_exact(src, dst)
    if not exact:
        if not allow_rounding:
            raise UnsupportedConversion(
                f"{src} -> {dst} is not exact ({src} spans [{src.min}, {src.max}] with "
                f"smallest {src.smallest_subnormal}; {dst} cannot hold every value); "
                f"pass allow_rounding=True to round through f32")
        inner = conversion_rule(src, parse("f32"))
        return dataclasses.replace(inner, dst=dst, exact=False, via_f32=True)

    b, t_m = src.bits, dst.mantissa_bits
    if src.is_integer:
        assert b <= t_m + 1  # every code fits the mantissa, but for one top bit
        signed = src.kind is Kind.SIGNED
        offset = 1 << (b - 1) if signed else 0
        magic = float(1 << t_m)  # ulp(magic) = 1
        y_value = magic + offset
        y_bits = float_bits(y_value, dst)
        # b = T+1: the top bit h of u goes to y = magic + offset - 2^T*h.
        y_step = y_bits - float_bits(y_value - (1 << t_m), dst) if b > t_m else 0
        return ConversionRule(
            src, dst, True, flip=offset, low_mask=(1 << min(b, t_m)) - 1,
            magic_bits=float_bits(magic, dst), y_bits=y_bits, y_value=y_value,
            y_step=y_step)

    e, m, t_e = src.exponent_bits, src.mantissa_bits, dst.exponent_bits
    # The move needs the fields to fit, and an all-ones source field may land on the
    # target's inf/NaN field only when it means inf/NaN in the source too (is_exact
    # guarantees both: a wider or equally wide finite exponent overflows dst's range).
    assert m <= t_m and (e < t_e or (e == t_e and src.specials is Specials.IEEE))
    special_mask = 0
    if src.specials is Specials.IEEE and e < t_e:
        special_mask = ((1 << e) - 1) << m  # exponent all ones: inf or NaN
    elif src.specials is Specials.FN:
        special_mask = (1 << (b - 1)) - 1  # exponent and mantissa all ones: NaN
    return ConversionRule(
        src, dst, True,
        sign_shift=dst.bits - b, sign_mask=1 << (dst.bits - 1),
        field_shift=t_m - m, field_mask=((1 << (b - 1)) - 1) << (t_m - m),
        special_mask=special_mask, special_fill=((1 << t_e) - 1) << t_m,
        scale_exponent=dst.bias - src.bias)


def max_pair_offset(src: DataType | str, dst: DataType | str) -> int:
    """The largest bit offset of the codes in their 16-bit lanes `emit_convert_pair`
    takes for (src, dst): a float code's fields are moved by shifts of any amount (the
    code must fit the lane: 16 - b); an integer code at offset s makes `magic + u * 2^s`,
    which must stay inside the target's T-bit mantissa (T - b; none when the code has
    a bit more than the mantissa, 8-bit codes into bf16). 0 for f32 and inexact pairs."""
    rule = conversion_rule(src, dst)
    b = rule.src.bits
    if rule.dst.bits != 16:
        return 0
    if rule.src.is_integer:
        return 0 if rule.y_step else rule.dst.mantissa_bits - b
    return 16 - b


def takes_exponent(src: DataType | str, dst: DataType | str, exponent: int) -> bool:
    """Whether `emit_convert_pair` makes `value * 2^exponent` (rounded once) by its own
    float op: a float source (its rule multiplies by a power of two, which the exponent
    joins; none when they cancel), an exact pair, and the power a value of dst."""
    if not exponent:
        return True
    rule = conversion_rule(src, dst, allow_rounding=True)
    if rule.src.is_integer or rule.via_f32 or rule.dst.bits != 16:
        return False
    power = Fraction(2) ** (rule.scale_exponent + exponent)
    return rule.dst.smallest_subnormal_exact <= power <= rule.dst.max_exact


def lane_pairs(bits: int, count: int) -> list[tuple[int, int]] | None:
    """The codes `convert_packed` converts together, for `count` codes of `bits` bits
    packed from bit 0 of whole 32-bit words: code p with code p + d, the first half of
    each block of 2d codes with the second, where d * b = 16 (mod 32). Their bits lie
    16 + 32m apart (m = (d * b - 16) / 32: 0 for b in {1, 2, 4, 8}, whose pairs share a
    word), so the two codes sit at the same offset in a low and a high 16-bit lane.
    None when the codes are not whole blocks."""
    d = next(d for d in range(1, 33) if d * bits % 32 == 16)
    if count % (2 * d):
        return None
    return [(base + j, base + d + j) for base in range(0, count, 2 * d) for j in range(d)]


def pairs_convert(src: DataType, dst: DataType) -> bool:
    """Whether `convert_packed` (backend/llvm/arith.py) converts src -> dst two registers
    at a time: low-bit codes (1..8-bit integers and floats, held in i1/i8 registers) into
    f16/bf16, exactly."""
    return (src.is_lowbit and dst.name in ("f16", "bf16")
            and is_exact(src, dst))


@dataclass(frozen=True)
class EncodeRule:
    """The constants of f32 -> `dst` codes with `dtypes.encode`'s rounding (module doc).

    `rebias`: subtracted from the f32 magnitude bits in dst's normal range; `shift`:
    `23 - M`, the f32 mantissa bits below the code; `min_normal_bits`: the f32 bits of
    2^emin (below: the subnormal formula, `|x| * subnormal_scale + 2^23`); `max_code`:
    the largest magnitude code (+-max, or inf for IEEE formats); `sign_bit`; `nan_code`
    (None for a format without NaN, where NaN saturates like a large value).
    """

    dst: DataType
    rebias: int
    shift: int
    min_normal_bits: int
    subnormal_scale: float
    max_code: int
    sign_bit: int
    nan_code: int | None


@functools.cache
def encode_rule(dst: DataType | str) -> EncodeRule:
    """The f32 -> code rule for a 1..8-bit float `dst` (`UnsupportedConversion` else)."""
    dst = as_source(dst)
    if not dst.is_float:
        raise UnsupportedConversion(f"the encode rule makes float codes, not {dst}")
    m, e, b = dst.mantissa_bits, dst.exponent_bits, dst.bits
    emin = dst.min_exponent
    if dst.specials is Specials.IEEE:
        max_code = ((1 << e) - 1) << m  # the inf code: overflow rounds to it
    elif dst.specials is Specials.FN:
        max_code = (1 << (b - 1)) - 2  # all ones is NaN
    else:
        max_code = (1 << (b - 1)) - 1
    return EncodeRule(dst, rebias=(127 - dst.bias) << 23, shift=23 - m,
                      min_normal_bits=(emin + 127) << 23, subnormal_scale=2.0 ** (m - emin),
                      max_code=max_code, sign_bit=1 << (b - 1), nan_code=dst.nan_code)
