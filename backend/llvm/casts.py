"""The generic cast: any type -> any type, with the interpreter's semantics.

`arith.convert_value` emits LLVM's own conversions where they already mean what the
interpreter does (`has_direct_rule`: floats of 16 and 32 bits between themselves,
integers into them, floats into integers of a whole register, integers into integers
whose range holds the source's) and the low-bit decode rules (`llvm.conversion`).
Every other pair takes ONE rule here, read from the two types' fields, never from a
table of pairs:

* integer -> integer: the value widened to i64, clamped to the target's range where
  the source's range exceeds it (`dtypes.encode` saturates), then narrowed.
* otherwise the value goes to f32 first, exactly: a 1..8-bit float by its decode rule
  (`conversion.emit_convert`), an integer of up to 24 bits by `sitofp`/`uitofp`,
  f16/bf16 by `fpext`. An int32/uint32 of magnitude >= 2^24 keeps its top 23 bits and
  ORs every lower bit into one sticky bit below them (`_sticky_f32`): that f32 is exact
  and rounds to every format of at most 14 significant bits as the integer itself
  does (the round bit and the sticky bit survive), so the second rounding is the only
  one.
* f32 -> 1..8-bit float: `dtypes.encode`'s rounding as integer ops on the f32's bits
  (`emit_encode`; the rule and why it holds: `dtypes.conversion`, `encode_rule`).
  f32 -> integer: round to nearest even (`llvm.rint`), saturate to the register's
  range (`fptosi.sat`), and clamp to a sub-byte type's range. f32 -> f16/bf16:
  `fptrunc` (round to nearest even, overflow to inf).

NaN into an integer or into a format without NaN is an error in the interpreter; the
compiled code gives some value of the type there (it does not trap).
"""

from __future__ import annotations

import llvmlite.ir as ir

from tilevm.backend.llvm.conversion import emit_convert
from tilevm.backend.llvm.types import I32, I64, intrinsic, llvm_type
from tilevm.dtypes import DataType, parse
from tilevm.dtypes.conversion import encode_rule

__all__ = ["emit_cast", "emit_encode", "emit_exact_f32", "has_direct_rule",
           "round_to_integer"]

_F32 = ir.FloatType()
_F32_EXACT_INT_BITS = 24  # every integer of magnitude < 2^24 is an f32


def has_direct_rule(src: DataType, dst: DataType) -> bool:
    """Whether LLVM's own conversion of (src, dst) registers is the interpreter's cast
    (`arith.convert_value` emits it): RNE with saturation, read from the types' ranges."""
    if src.is_lowbit and src.is_float or dst.is_lowbit and dst.is_float:
        return False  # codes in an i8: no LLVM type for them
    if src.is_float and dst.is_float:
        return True
    if dst.is_float:  # sitofp/uitofp: one rounding to nearest even, but LLVM may make
        # a 16-bit float through f32: a second rounding, unless f32 holds the integer
        # or every integer f32 would round overflows dst (f16)
        return (dst.bits == 32 or src.bits <= _F32_EXACT_INT_BITS
                or dst.max_exact < 2 ** _F32_EXACT_INT_BITS)
    if src.is_float:  # fptosi.sat saturates to the register's range: the type's own?
        return llvm_type(dst).width == dst.bits
    return src.min_exact >= dst.min_exact and src.max_exact <= dst.max_exact


def emit_cast(b: ir.IRBuilder, value: ir.Value, src: DataType, dst: DataType) -> ir.Value:
    """`value` (a register of `src`) as a register of `dst`, with the interpreter's
    rounding and saturation (see the module)."""
    if src.is_integer and dst.is_integer:
        return _clamp_integer(b, _widen(b, value, src), src, dst)
    x = emit_exact_f32(b, value, src)
    if dst.is_integer:
        return _f32_to_integer(b, x, dst)
    if dst.is_lowbit:
        return emit_encode(b, x, dst)
    dst_ty = llvm_type(dst)
    return x if dst_ty == _F32 else b.fptrunc(x, dst_ty)


def emit_exact_f32(b: ir.IRBuilder, value: ir.Value, src: DataType) -> ir.Value:
    """An f32 of `value` that rounds to every target of <= 14 significant bits as the
    value itself does: the value, where f32 holds it (all but the widest integers)."""
    if src.is_float:
        if src.is_lowbit:
            return emit_convert(b, value, src, parse("f32"))
        return value if value.type == _F32 else b.fpext(value, _F32)
    if src.bits < _F32_EXACT_INT_BITS:
        return b.sitofp(value, _F32) if src.is_signed else b.uitofp(value, _F32)
    if src.bits == 32:
        return _sticky_f32(b, value, src.is_signed)
    # 64-bit integers: one rounding to f32 (a second one after it may differ from a
    # direct rounding for magnitudes of 2^24 and above)
    return b.sitofp(value, _F32) if src.is_signed else b.uitofp(value, _F32)


def _sticky_f32(b: ir.IRBuilder, value: ir.Value, signed: bool) -> ir.Value:
    """An i32 as an exact f32 keeping its round and sticky bits (see the module)."""
    magnitude = value
    if signed:  # |x| as an unsigned i32 (|-2^31| = 2^31 fits)
        negative = b.icmp_signed("<", value, I32(0))
        magnitude = b.select(negative, b.sub(I32(0), value), value)
    low = 0x1FF  # bits 31..9 (23 bits) and the sticky bit 8: 24 significant bits
    sticky = b.select(b.icmp_unsigned("!=", b.and_(magnitude, I32(low)), I32(0)),
                      I32(1 << 8), I32(0))
    collapsed = b.or_(b.and_(magnitude, I32(~low & 0xFFFFFFFF)), sticky)
    wide = b.icmp_unsigned(">=", magnitude, I32(1 << _F32_EXACT_INT_BITS))
    result = b.uitofp(b.select(wide, collapsed, magnitude), _F32)
    return b.select(negative, b.fneg(result), result) if signed else result


def emit_encode(b: ir.IRBuilder, x: ir.Value, dst: DataType) -> ir.Value:
    """An f32 as the code of a 1..8-bit float (its i8 register), rounded as
    `dtypes.encode` rounds (`dtypes.conversion.encode_rule`)."""
    rule = encode_rule(dst)
    bits = b.bitcast(x, I32)
    magnitude = b.and_(bits, I32(0x7FFFFFFF))
    # normal range: the re-biased bits, shifted right by `shift` with round to even
    rebiased = b.sub(magnitude, I32(rule.rebias))
    odd = b.and_(b.lshr(rebiased, I32(rule.shift)), I32(1))
    bias = b.add(I32((1 << (rule.shift - 1)) - 1), odd)
    normal = b.lshr(b.add(rebiased, bias), I32(rule.shift))
    # subnormal range: |x| * 2^(M - emin) + 2^23 rounds to an integer, its low bits
    scaled = b.fmul(b.bitcast(magnitude, _F32), ir.Constant(_F32, rule.subnormal_scale))
    rounded = b.fadd(scaled, ir.Constant(_F32, 2.0 ** 23))
    subnormal = b.sub(b.bitcast(rounded, I32), I32(0x4B000000))
    below = b.icmp_unsigned("<", magnitude, I32(rule.min_normal_bits))
    code = b.select(below, subnormal, normal)
    over = b.icmp_unsigned(">", code, I32(rule.max_code))
    code = b.select(over, I32(rule.max_code), code)
    code = b.or_(code, b.and_(b.lshr(bits, I32(31 - (dst.bits - 1))), I32(rule.sign_bit)))
    if rule.nan_code is not None:
        nan = b.icmp_unsigned(">", magnitude, I32(0x7F800000))
        code = b.select(nan, I32(rule.nan_code), code)
    return b.trunc(code, llvm_type(dst))


def round_to_integer(b: ir.IRBuilder, x: ir.Value, ty: ir.IntType, signed: bool) -> ir.Value:
    """A float register rounded to nearest even (`llvm.rint`), then saturated to the range
    of the integer register `ty` (`fptosi.sat` / `fptoui.sat`)."""
    rint = b.call(intrinsic(b, "llvm.rint", x.type, [x.type]), [x])
    name = "llvm.fptosi.sat" if signed else "llvm.fptoui.sat"
    return b.call(intrinsic(b, name, ty, [rint.type]), [rint])


def _f32_to_integer(b: ir.IRBuilder, x: ir.Value, dst: DataType) -> ir.Value:
    """Round to nearest even, then saturate to dst's range."""
    dst_ty = llvm_type(dst)
    whole = dst_ty.width == dst.bits  # the register's range is the type's
    value = round_to_integer(b, x, dst_ty if whole else I32, dst.is_signed)
    if whole:
        return value
    return _clamp_integer(b, b.sext(value, I64) if dst.is_signed else b.zext(value, I64),
                          parse("int32") if dst.is_signed else parse("uint32"), dst)


def _widen(b: ir.IRBuilder, value: ir.Value, src: DataType) -> ir.Value:
    if value.type.width == 64:
        return value
    return b.sext(value, I64) if src.is_signed else b.zext(value, I64)


def _clamp_integer(b: ir.IRBuilder, wide: ir.Value, src: DataType, dst: DataType) -> ir.Value:
    """An i64 holding a value of `src`, clamped to dst's range, as dst's register."""
    if src.min_exact < dst.min_exact:  # a signed source only
        low = I64(int(dst.min_exact))
        wide = b.select(b.icmp_signed("<", wide, low), low, wide)
    if src.max_exact > dst.max_exact:
        high = I64(int(dst.max_exact))
        above = (b.icmp_signed if src.is_signed else b.icmp_unsigned)(">", wide, high)
        wide = b.select(above, high, wide)
    dst_ty = llvm_type(dst)
    return wide if dst_ty.width == 64 else b.trunc(wide, dst_ty)
