"""The generic conversion rules, low-bit codes -> f16 / bf16 / f32, emitted as LLVM IR.

The rules themselves (which bits go where, exactness, the constants) are data in
`tilevm.dtypes.conversion`; this module emits them as portable LLVM IR: a few integer
operations that move a code's bits into the target's fields, then ONE floating-point
operation that fixes the value (two for an inexact pair made in f32 and rounded).

A rule needs the GPU to keep subnormals in the float op (PTX `mul.f16`, `fma.bf16`
always do; for f32 do not compile with `.ftz`, i.e. no `denormal-fp-math-f32` =
`preserve-sign` attribute): a source subnormal passes through a subnormal pattern.

The API (every emitter takes an `llvmlite.ir.IRBuilder` positioned where to emit):

* `emit_convert(builder, code, src, dst)`: one code in the low bits of an integer
  value (i8/i16/i32/...; bits above the code are ignored) -> `half`/`bfloat`/`float`.
* `emit_convert_pair(builder, lanes, src, dst, offset=0)`: two codes in one i32, in
  bits `[s, s + b)` and `[16 + s, 16 + s + b)`, s = `offset` up to `max_pair_offset`
  (other bits ignored) -> `<2 x half>` / `<2 x bfloat>`,
  with 32-bit integer ops on both 16-bit lanes at once (SWAR; no carry crosses a lane)
  and ONE `<2 x ...>` float op (PTX `mul.f16x2` / `sub.f16x2` / `fma.rn.bf16x2`).
  `exponent=k` makes `value * 2^k` for a float source (`takes_exponent`): the rule's
  multiplication by a power of two takes k too, and none is left where they cancel.
  For f32 it gives `<2 x float>` (two 32-bit lanes; the float op is one vector
  instruction in the IR, two `mul.f32` in PTX).
* `emit_extract_code(builder, word, index, bits)`: the `index`-th b-bit code of a packed
  word (element i at bits `[i*b, (i+1)*b)`, the dtypes packing order), as an i32.
  `emit_extract_pair(builder, word, bits, first, second)` puts two codes of a word in
  the two lanes `emit_convert_pair` reads; when their bit offsets differ by 16 (b = 1,
  2, 4, 8 with `second = first + 16/b`) that is one shift and one and.
  Codes that straddle two 32-bit words (b = 3, 5, 6, 7): concatenate the words into an
  i64 (`hi << 32 | lo`, a `mov.b64` on the GPU; or a funnel shift `shf.r`) and take the
  field at the code's bit offset modulo 32 with `emit_extract_field(builder, word64,
  offset, bits)`; the extractors accept any integer width.
* `BFLOAT` is an `llvmlite.ir` type for LLVM's `bfloat` (llvmlite has none);
  `float_ir_type(dst)` the LLVM type of a target.
"""

from __future__ import annotations

import struct

import llvmlite.ir as ir
from llvmlite.ir import types as _ir_types

from tilevm.dtypes import DataType, parse
from tilevm.dtypes.conversion import (
    ConversionRule,
    as_target,
    conversion_rule,
    float_bits,
    max_pair_offset,
    takes_exponent,
)

__all__ = [
    "BFLOAT", "BFloatType", "emit_convert", "emit_convert_pair", "emit_extract_code",
    "emit_extract_field", "emit_extract_pair", "float_ir_type",
]


class BFloatType(_ir_types._BaseFloatType):
    """LLVM's `bfloat` type for llvmlite.ir (constants print as `0xRhhhh`, exact only)."""

    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self) -> str:
        return "bfloat"

    def format_constant(self, value: float) -> str:
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        if bits & 0xFFFF and value == value:  # a NaN's payload is not checked
            raise ValueError(f"{value!r} is not a bfloat value")
        return f"0xR{bits >> 16:04X}"


BFloatType._create_instance()
BFLOAT = BFloatType()

_I32 = ir.IntType(32)


def float_ir_type(dst: DataType | str) -> ir.Type:
    """The LLVM float type of a conversion target: `half`, `bfloat` or `float`."""
    dst = as_target(dst)
    return {"f16": ir.HalfType(), "bf16": BFLOAT, "f32": ir.FloatType()}[dst.name]


# ---- lanes: the same rule on one value, on two 16-bit lanes of an i32, or on <2 x i32> ---

class _Lanes:
    """How constants and per-lane tests are emitted for one lane arrangement.

    `scalar`: one value in an iN (N = dst width). `swar`: two 16-bit lanes of one i32;
    every step keeps each lane's bits inside its lane, so 32-bit ops serve both at once.
    `vector`: `<2 x i32>` (the f32 pair), element-wise ops.
    """

    def __init__(self, mode: str, lane_bits: int):
        self.mode = mode
        self.lane_bits = lane_bits
        if mode == "scalar":
            self.int_type = ir.IntType(lane_bits)
        elif mode == "swar":
            assert lane_bits == 16
            self.int_type = _I32
        else:
            self.int_type = ir.VectorType(ir.IntType(lane_bits), 2)

    def const(self, value: int) -> ir.Constant:
        """`value` in every lane."""
        if self.mode == "scalar":
            return ir.Constant(self.int_type, value)
        if self.mode == "swar":
            return ir.Constant(_I32, value | (value << 16))
        return ir.Constant(self.int_type, [value, value])

    def opaque(self, builder: ir.IRBuilder, value: int) -> ir.Value:
        """`value` in every lane, as a register the PTX assembler keeps: read once from
        memory at the function's entry where the lanes are one integer (`_opaque`)."""
        const = self.const(value)
        return const if self.mode == "vector" else _opaque(builder, const)

    def opaque_float(self, builder: ir.IRBuilder, value: float, dst: DataType,
                     scalar: ir.Type) -> ir.Value:
        """`value` (of the 16-bit float type `dst`) in every lane, as a register the PTX
        assembler keeps (`opaque`) where the lanes are one integer. Why: `HFMA2` takes one
        immediate pair, so the other constant operand lives in a register, and ptxas,
        short of registers, put it in the unused upper half of a register holding a
        loaded scale: every conversion then waited for the scale's global load."""
        if self.mode != "swar":
            return self.float_const(value, scalar)
        return builder.bitcast(self.opaque(builder, float_bits(value, dst)),
                               self.float_type(scalar))

    def amount(self, value: int) -> ir.Constant:
        """A shift amount or multiplier, the same for every lane: in the swar mode it is
        one plain i32 operand (a shift moves both lanes; a product of a 0/1 lane by a
        factor < 2^16 stays in its lane), never the value replicated in each lane."""
        return ir.Constant(_I32, value) if self.mode == "swar" else self.const(value)

    def float_type(self, scalar: ir.Type) -> ir.Type:
        return scalar if self.mode == "scalar" else ir.VectorType(scalar, 2)

    def float_const(self, value: float, scalar: ir.Type) -> ir.Constant:
        if self.mode == "scalar":
            return ir.Constant(scalar, value)
        return ir.Constant(ir.VectorType(scalar, 2), [value, value])

    def fill_where_all_ones(self, builder: ir.IRBuilder, code: ir.Value, x: ir.Value,
                            field: int, fill: int) -> ir.Value:
        """`x | fill` in the lanes whose `code & field == field`, else `x`."""
        if self.mode != "swar":
            hit = builder.icmp_unsigned("==", builder.and_(code, self.const(field)),
                                        self.const(field))
            return builder.select(hit, builder.or_(x, self.const(fill)), x)
        # SWAR: t = code & field; t + lowest_bit(field) carries into the bit above the
        # field iff every bit of the field is set (t <= field, so the sum stays below
        # the next lane). That carry bit c = 2^above times `fill / 2^above` is `fill`
        # or 0 per lane (the product stays in the lane): a branch-free select. `fill`
        # (the target's exponent field, from bit T up) is a multiple of 2^above since
        # above = b - 1 <= T; otherwise the carry is first moved to bit 0.
        low = field & -field
        above = field.bit_length()
        t = builder.and_(code, self.const(field))
        carry = builder.and_(builder.add(t, self.const(low)), self.const(1 << above))
        if fill % (1 << above) == 0:
            spread = builder.mul(carry, self.amount(fill >> above))
        else:
            spread = builder.mul(builder.lshr(carry, self.amount(above)), self.amount(fill))
        return builder.or_(x, spread)


def _emit_rule(builder: ir.IRBuilder, code: ir.Value, rule: ConversionRule,
               lanes: _Lanes, scalar_type: ir.Type, offset: int = 0,
               exponent: int = 0) -> ir.Value:
    """The rule on `code` (of `lanes.int_type`; the code at bit `offset` of each lane)
    -> float (scalar or `<2 x ...>`), times 2^exponent (float rules only: it joins the
    rule's own power of two, `takes_exponent`)."""
    out_type = lanes.float_type(scalar_type)
    s = offset
    if rule.src.is_integer:
        if rule.y_step:
            u = builder.xor(code, lanes.const(rule.flip << s)) if rule.flip else code
            x = builder.or_(builder.and_(u, lanes.const(rule.low_mask << s)),
                            lanes.const(rule.magic_bits))
        else:  # the flip lies in the mask: (u & mask) | magic = (code & mask) ^ bias
            bias = lanes.opaque(builder, (rule.flip << s) | rule.magic_bits)
            x = builder.xor(builder.and_(code, lanes.const(rule.low_mask << s)), bias)
        if s:  # x = magic + u * 2^s (s <= T - b keeps it in the mantissa): one fma
            magic = float(1 << rule.dst.mantissa_bits)
            return _fma(builder, builder.bitcast(x, out_type),
                        lanes.opaque_float(builder, 2.0 ** -s, rule.dst, scalar_type),
                        lanes.float_const(-(magic * 2.0 ** -s + rule.flip), scalar_type))
        if rule.y_step:  # b = T + 1: the top bit of u lowers the subtrahend by 2^T
            t_m = rule.dst.mantissa_bits
            h = builder.and_(builder.lshr(u, lanes.amount(t_m)), lanes.const(1))
            y_int = builder.sub(lanes.const(rule.y_bits),
                                builder.mul(h, lanes.amount(rule.y_step)))
            y = builder.bitcast(y_int, out_type)
        else:
            y = lanes.float_const(rule.y_value, scalar_type)
        return builder.fsub(builder.bitcast(x, out_type), y)

    sign = builder.and_(_shift(builder, code, rule.sign_shift - s, lanes),
                        lanes.const(rule.sign_mask))
    field = builder.and_(_shift(builder, code, rule.field_shift - s, lanes),
                         lanes.const(rule.field_mask))
    x = builder.or_(sign, field)
    if rule.special_mask:
        x = lanes.fill_where_all_ones(builder, code, x, rule.special_mask << s,
                                      rule.special_fill)
    value = builder.bitcast(x, out_type)
    if rule.scale_exponent + exponent:
        value = builder.fmul(value, lanes.float_const(2.0 ** (rule.scale_exponent + exponent),
                                                      scalar_type))
    return value


def _opaque(builder: ir.IRBuilder, const: ir.Constant) -> ir.Value:
    """`const`, loaded once per function at its entry from a module global of that value.

    Why: a code's conversion `(code & mask) ^ bias` is one three-input logic op (`LOP3`)
    on the GPU, but `LOP3` takes one immediate; with both constants immediate in the PTX,
    ptxas keeps one as the immediate and, short of registers, re-materializes the other
    before every `LOP3` (an `IMAD.MOV` per converted pair: 32 of the wgmma kernel's 245
    instructions per k-tile). A value read from memory is not a constant to ptxas, so it
    stays in one register and every conversion is one `LOP3`. (The global is never
    written; it is not marked constant so that neither LLVM nor ptxas folds the load.)"""
    fn = builder.function
    cache = fn.__dict__.setdefault("_tilevm_opaque", {})
    key = (str(const.type), const.constant)
    if key not in cache:
        module = fn.module
        name = f"tilevm_opaque_{const.type}_{const.constant & 0xFFFFFFFFFFFFFFFF:x}"
        glob = module.globals.get(name)
        if glob is None:
            glob = ir.GlobalVariable(module, const.type, name)
            glob.initializer = const
            glob.align = const.type.width // 8
        # (the builder's own position: another builder inserting into its block would
        # leave its insertion index stale; `goto_block` returns to the block's end)
        with builder.goto_block(fn.entry_basic_block):
            builder.position_at_start(fn.entry_basic_block)
            cache[key] = builder.load(glob, name="opaque")
    return cache[key]


def _shift(builder: ir.IRBuilder, value: ir.Value, amount: int, lanes: _Lanes) -> ir.Value:
    """`value << amount` (a negative amount: a logical shift right)."""
    if amount > 0:
        return builder.shl(value, lanes.amount(amount))
    return builder.lshr(value, lanes.amount(-amount)) if amount else value


def _fma(builder: ir.IRBuilder, x: ir.Value, a: ir.Value, c: ir.Value) -> ir.Value:
    """`x * a + c` for an exact product and sum: a `contract` multiply and add, which
    NVPTX fuses into one `fma.rn.f16x2` / `bf16x2` (one rounding or two, the result is
    the same: both steps are exact; a host compiler may keep them apart, with no call
    to a runtime's half-precision fma)."""
    return builder.fadd(builder.fmul(x, a, flags=("contract",)), c, flags=("contract",))


def _resize(builder: ir.IRBuilder, value: ir.Value, int_type: ir.IntType) -> ir.Value:
    if not isinstance(value.type, ir.IntType):
        raise TypeError(f"a code is an integer value, got {value.type}")
    if value.type.width > int_type.width:
        return builder.trunc(value, int_type)
    if value.type.width < int_type.width:
        return builder.zext(value, int_type)
    return value


def emit_convert(builder: ir.IRBuilder, code: ir.Value, src: DataType | str,
                 dst: DataType | str, *, allow_rounding: bool = False) -> ir.Value:
    """Convert one code (low bits of an integer value; higher bits ignored) to dst's float.

    Emits integer ops and one float op (two for an inexact pair with `allow_rounding`).
    """
    rule = conversion_rule(src, dst, allow_rounding=allow_rounding)
    inner = parse("f32") if rule.via_f32 else rule.dst
    lanes = _Lanes("scalar", inner.bits)
    value = _emit_rule(builder, _resize(builder, code, lanes.int_type), rule, lanes,
                       float_ir_type(inner))
    return builder.fptrunc(value, float_ir_type(rule.dst)) if rule.via_f32 else value


def emit_convert_pair(builder: ir.IRBuilder, lanes_word: ir.Value, src: DataType | str,
                      dst: DataType | str, *, offset: int = 0, exponent: int = 0,
                      allow_rounding: bool = False) -> ir.Value:
    """Convert the two codes of an i32 (bits [offset, offset+b) and [16+offset,
    16+offset+b); other bits ignored) to `<2 x dst>`.

    f16/bf16: 32-bit integer ops on both lanes and one `<2 x half|bfloat>` float op. A
    code at an offset (`max_pair_offset`) needs no shift of its own: the float rule
    shifts its fields by other amounts; the integer rule reads `magic + u * 2^offset`
    and its float op is an fma by `2^-offset` instead of a subtraction. So one shift of
    a packed word serves the codes of several pairs (`arith.convert_packed`).
    f32 (or an inexact pair with `allow_rounding`, made in f32 then `fptrunc`): the
    lanes are split into `<2 x i32>` and the float op works on `<2 x float>`.
    `exponent`: the values times 2^exponent, where `takes_exponent`.
    """
    rule = conversion_rule(src, dst, allow_rounding=allow_rounding)
    if not takes_exponent(src, dst, exponent):
        raise ValueError(f"{rule.src} -> {rule.dst} pairs take no exponent {exponent} "
                         f"(see takes_exponent)")
    if not (isinstance(lanes_word.type, ir.IntType) and lanes_word.type.width == 32):
        raise TypeError(f"a pair of codes is an i32, got {lanes_word.type}")
    if offset and not (0 <= offset <= max_pair_offset(src, dst) and rule.exact):
        raise ValueError(f"{rule.src} -> {rule.dst} pairs take codes at offsets "
                         f"0..{max_pair_offset(src, dst) if rule.exact else 0}, "
                         f"got {offset}")
    inner = parse("f32") if rule.via_f32 else rule.dst
    if inner.bits == 16:
        return _emit_rule(builder, lanes_word, rule, _Lanes("swar", 16), float_ir_type(inner),
                          offset, exponent)
    lanes = _Lanes("vector", 32)
    halves = builder.bitcast(lanes_word, ir.VectorType(ir.IntType(16), 2))
    value = _emit_rule(builder, builder.zext(halves, lanes.int_type), rule, lanes,
                       float_ir_type(inner))
    if rule.via_f32:
        value = builder.fptrunc(value, ir.VectorType(float_ir_type(rule.dst), 2))
    return value


# ---- extraction of codes from packed words ---------------------------------------------

def emit_extract_code(builder: ir.IRBuilder, word: ir.Value, index: int | ir.Value,
                      bits: int) -> ir.Value:
    """The `index`-th `bits`-bit code of a packed word (bits [index*b, (index+1)*b)), as i32.

    `word` is any integer type. A constant index must keep the code inside the word; a
    runtime index (an integer `ir.Value`) is the caller's to keep in range.
    """
    width = _check_word(word, bits)
    if isinstance(index, int):
        if index < 0 or (index + 1) * bits > width:
            raise ValueError(f"code {index} of {bits} bits is not inside an i{width}")
        return emit_extract_field(builder, word, index * bits, bits)
    offset = builder.mul(_resize(builder, index, word.type), ir.Constant(word.type, bits))
    return emit_extract_field(builder, word, offset, bits)


def emit_extract_field(builder: ir.IRBuilder, word: ir.Value, bit_offset: int | ir.Value,
                       bits: int) -> ir.Value:
    """The `bits`-bit field at `bit_offset` of an integer word, as i32: `(word >> o) & mask`.

    A code straddling two 32-bit words of a packed stream (b = 3, 5, 6, 7): pass the i64
    `hi << 32 | lo` of the two words and the code's stream bit offset modulo 32.
    """
    width = _check_word(word, bits)
    if isinstance(bit_offset, int):
        if bit_offset < 0 or bit_offset + bits > width:
            raise ValueError(f"bits [{bit_offset}, {bit_offset + bits}) are not inside an "
                             f"i{width}")
        shifted = builder.lshr(word, ir.Constant(word.type, bit_offset)) if bit_offset else word
    else:
        shifted = builder.lshr(word, _resize(builder, bit_offset, word.type))
    code = builder.and_(shifted, ir.Constant(word.type, (1 << bits) - 1))
    return _resize(builder, code, _I32)


def emit_extract_pair(builder: ir.IRBuilder, word: ir.Value, bits: int, first: int,
                      second: int | None = None) -> ir.Value:
    """Codes `first` and `second` (default `first + 1`) of a packed word, in the two lanes
    of an i32 (bits [0, b) and [16, 16+b)) as `emit_convert_pair` reads them."""
    width = _check_word(word, bits)
    second = first + 1 if second is None else second
    for index in (first, second):
        if index < 0 or (index + 1) * bits > width:
            raise ValueError(f"code {index} of {bits} bits is not inside an i{width}")
    mask = (1 << bits) - 1
    lo_shift, hi_shift = first * bits, second * bits - 16  # hi lane: move bit s2 to 16
    if hi_shift == lo_shift:  # offsets 16 apart: one shift serves both lanes
        both = builder.and_(builder.lshr(word, ir.Constant(word.type, lo_shift)),
                            ir.Constant(word.type, mask | (mask << 16)))
        return _resize(builder, both, _I32)
    lo = builder.lshr(word, ir.Constant(word.type, lo_shift)) if lo_shift else word
    lo = builder.and_(lo, ir.Constant(word.type, mask))
    if hi_shift >= 0:
        moved = builder.lshr(word, ir.Constant(word.type, hi_shift))
    else:
        moved = builder.shl(word, ir.Constant(word.type, -hi_shift))
    hi = builder.and_(moved, ir.Constant(word.type, mask << 16))
    return _resize(builder, builder.or_(lo, hi), _I32)


def _check_word(word: ir.Value, bits: int) -> int:
    if not isinstance(word.type, ir.IntType):
        raise TypeError(f"a packed word is an integer value, got {word.type}")
    if not 1 <= bits <= 8:
        raise ValueError(f"codes have 1..8 bits, got {bits}")
    return word.type.width
