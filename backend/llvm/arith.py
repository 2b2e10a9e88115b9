"""LLVM IR for scalar arithmetic and value conversions, shared by codegen and the
lowerings: one value's conversion between dtypes (the low-bit rules of
`llvm.conversion` included), packed codes converted two at a time, the operators of
ir/expr.py and of `elementwise`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import llvmlite.ir as ir

from tilevm.backend.llvm import casts, conversion
from tilevm.backend.llvm.bits import extract_bits, from_bits
from tilevm.backend.llvm.types import I32, intrinsic, llvm_type
from tilevm.dtypes import DataType, Kind, parse
from tilevm.dtypes.conversion import lane_pairs, max_pair_offset, pairs_convert, takes_exponent
from tilevm.ir.errors import VMError

F32 = parse("f32")


def convert_value(b: ir.IRBuilder, value: ir.Value, src: DataType, dst: DataType) -> ir.Value:
    """One value from `src` to `dst`: round to nearest even, saturating integers."""
    if src == dst:
        return value
    if src.is_lowbit and (src.is_float or src.bits < 8) and dst.is_float and dst.bits >= 16:
        # (an inexact pair, f6e5m0 -> f16 say, is made in f32 and rounded once)
        return conversion.emit_convert(b, value, src, dst, allow_rounding=True)
    if not casts.has_direct_rule(src, dst):  # the generic rule through f32 or i64
        return casts.emit_cast(b, value, src, dst)
    dst_ty = llvm_type(dst)
    if src.is_float and dst.is_float:
        if src.bits == 16 and dst.bits == 16:  # f16 <-> bf16 through f32 (exact, then RNE)
            value, src = b.fpext(value, ir.FloatType()), F32
        if dst.bits > src.bits:
            return b.fpext(value, dst_ty)
        return b.fptrunc(value, dst_ty)
    if src.is_float:  # float -> integer: round to nearest even, then saturate
        return casts.round_to_integer(b, value, dst_ty, dst.kind is not Kind.UNSIGNED)
    if dst.is_float:
        return b.sitofp(value, dst_ty) if src.is_signed else b.uitofp(value, dst_ty)
    if dst.bits == src.bits or isinstance(dst_ty, ir.IntType) and dst_ty.width == value.type.width:
        return value
    if dst_ty.width < value.type.width:
        return b.trunc(value, dst_ty)
    return b.sext(value, dst_ty) if src.is_signed else b.zext(value, dst_ty)


def convert_scaled(b: ir.IRBuilder, value: ir.Value, src: DataType, dst: DataType,
                   exponent: int) -> ir.Value:
    """`convert_value` of `value * 2^exponent` (a 1..8-bit src): made exactly in f32
    (which holds every such value), multiplied there, then rounded once to dst."""
    if not exponent:
        return convert_value(b, value, src, dst)
    wide = b.fmul(convert_value(b, value, src, F32), ir.Constant(ir.FloatType(), 2.0 ** exponent))
    return convert_value(b, wide, F32, dst)


def convert_packed(b: ir.IRBuilder, words: list[ir.Value], count: int, src: DataType,
                   dst: DataType, exponent: int = 0) -> list[ir.Value]:
    """`count` low-bit codes held packed in i32 `words` (code `l` at bits `[l*b, (l+1)*b)`)
    -> `dst` values, bit-identical to `convert_value` on each code. Into f16/bf16
    (`pairs_convert`) two codes go through one `<2 x half|bfloat>` float op
    (`conversion.emit_convert_pair`): the codes `lane_pairs` gives, whose bits lie 16
    (mod 32) apart, so that both sit at one offset of a low and a high 16-bit lane (for
    b in {1, 2, 4, 8} in one word: one shift; otherwise one merge of two words, shared
    by their pairs); where the codes are not whole blocks of those pairs, consecutive
    codes out of 32-bit windows. A lanes word serves every pair up to
    `max_pair_offset` bits above its start. An odd last code is converted alone.
    `exponent`: the values times 2^exponent, in the pair's own float op where
    `takes_exponent`, else through f32 (`convert_scaled`)."""
    bits = src.bits

    def code(l: int) -> ir.Value:
        return extract_bits(b, words, l * bits, bits)

    if not (pairs_convert(src, dst) and takes_exponent(src, dst, exponent)):
        return [convert_scaled(b, from_bits(b, code(l), src), src, dst, exponent)
                for l in range(count)]
    reach = max_pair_offset(src, dst)
    paired = lane_pairs(bits, count)
    if paired is not None:
        return _convert_lane_pairs(b, words, paired, src, dst, exponent, reach)
    # Consecutive codes l, l + 1, from a 32-bit window `v` of the packed bits that
    # starts at or below code l: `(v & 0xFFFF) | v << (16 - b)` holds v's bits 0-15
    # in the low lane and bits b to b + 15 in the high one, so code l + 1 sits in its
    # lane at the same offset as code l in its own. (The shifted copy also leaves v's
    # lowest b bits at the top of the low lane: an offset up to 16 - 2b keeps them
    # clear of code l.) A window costs a (funnel) shift, a shift and one merge.
    pairs = [(l, l + 1) for l in range(0, count - 1, 2)]
    reach = min(reach, 16 - 2 * bits)

    def lanes_at(start: int) -> ir.Value:
        v = _window(b, words, start)
        return b.or_(b.and_(v, ir.Constant(I32, 0xFFFF)),
                     b.shl(v, ir.Constant(I32, 16 - bits)))
    # One window serves every later pair whose first code lies up to `reach` bits above
    # its start (the rule reads a code at an offset): two pairs of int3 into f16.
    plan: list[tuple[int, int, int, int]] = []  # (first, second, window start, offset)
    for first, second in pairs:
        if not plan or first * bits - plan[-1][2] > reach:
            start = first * bits
        plan.append((first, second, start, first * bits - start))
    out = _convert_planned(b, plan, lanes_at, count, src, dst, exponent)
    if count % 2 and out[-1] is None:
        out[-1] = convert_scaled(b, from_bits(b, code(count - 1), src), src, dst, exponent)
    return out  # type: ignore[return-value]


def _convert_lane_pairs(b: ir.IRBuilder, words: list[ir.Value],
                        pairs: list[tuple[int, int]], src: DataType, dst: DataType,
                        exponent: int, reach: int) -> list[ir.Value]:
    """`convert_packed` of `lane_pairs`. When the two codes lie inside their lanes (at
    offset `at` of each), one operation makes the lanes word: none when they share a
    word, an AND-OR of the first's low lane and the second's high one, or a funnel shift
    when the first is in a high lane (its word's high half, its partner's word's low
    half, swapped); that word, shifted down to a start, serves every later pair of the
    same two words up to `reach` bits above the start. A code that crosses a lane
    boundary comes with its partner out of two 32-bit windows."""
    bits = src.bits
    plan = []  # (first, second, lanes key, offset in the lanes word)
    starts: dict[tuple[int, int, bool], int] = {}  # the last start per pair of words
    for first, second in pairs:
        w_first, at = divmod(first * bits, 32)
        w_second = second * bits // 32
        if at % 16 + bits <= 16:
            words_key = (w_first, w_second, at < 16)  # (and whether first is in a low lane)
            at %= 16
            start = starts.get(words_key)
            if start is None or at - start > reach:
                start = starts[words_key] = at
            plan.append((first, second, (*words_key, start), at - start))
        else:
            plan.append((first, second, (first * bits, second * bits), 0))

    def lanes_of(key: tuple[int, ...]) -> ir.Value:
        if len(key) == 2:  # two windows, each code at the bottom of its lane
            return b.or_(b.and_(_window(b, words, key[0]), ir.Constant(I32, 0xFFFF)),
                         b.shl(_window(b, words, key[1]), ir.Constant(I32, 16)))
        w_first, w_second, low_first, start = key
        if w_first == w_second:
            word = words[w_first]
        elif low_first:
            word = b.or_(b.and_(words[w_first], ir.Constant(I32, 0xFFFF)),
                         b.and_(words[w_second], ir.Constant(I32, 0xFFFF0000)))
        else:
            fshr = intrinsic(b, "llvm.fshr", I32, [I32], [I32, I32, I32])
            word = b.call(fshr, [words[w_second], words[w_first], ir.Constant(I32, 16)])
        return b.lshr(word, ir.Constant(I32, start)) if start else word

    out = _convert_planned(b, plan, lanes_of, 2 * len(pairs), src, dst, exponent)
    return out  # type: ignore[return-value]  (every slot is a pair's)


def _convert_planned(b: ir.IRBuilder, plan: list[tuple[int, int, Any, int]],
                     lanes_of: Callable[[Any], ir.Value], count: int, src: DataType,
                     dst: DataType, exponent: int) -> list[ir.Value | None]:
    """The pairs of `plan`, `(first, second, lanes key, offset)`, each converted by one
    `emit_convert_pair` of the lanes word `lanes_of(key)` (made once per key) at that
    offset; `count` slots, None where no pair put a value. All lanes words come first,
    then the conversions: interleaved, they made ptxas allocate many more registers to
    the int8 decode kernel."""
    lanes = {key: lanes_of(key) for key in dict.fromkeys(k for _, _, k, _ in plan)}
    out: list[ir.Value | None] = [None] * count
    for first, second, key, offset in plan:
        pair = conversion.emit_convert_pair(b, lanes[key], src, dst, offset=offset,
                                             exponent=exponent)
        out[first], out[second] = (b.extract_element(pair, ir.Constant(I32, j))
                                   for j in (0, 1))
    return out


def _window(b: ir.IRBuilder, words: list[ir.Value], start: int) -> ir.Value:
    """Bits [start, start + 32) of the bit array held in i32 `words` (zeros past its
    end): one funnel shift (`shf.r`) of the two words it spans."""
    w, r = divmod(start, 32)
    if r == 0:
        return words[w]
    if w + 1 == len(words):
        return b.lshr(words[w], ir.Constant(I32, r))
    fshr = intrinsic(b, "llvm.fshr", I32, [I32], [I32, I32, I32])
    return b.call(fshr, [words[w + 1], words[w], ir.Constant(I32, r)])


_INT_OPS = {"+": "add", "-": "sub", "*": "mul", "&": "and_", "|": "or_", "^": "xor",
            "<<": "shl"}
_FLOAT_OPS = {"+": "fadd", "-": "fsub", "*": "fmul", "/": "fdiv"}


def scalar_binary(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value,
                  dtype: DataType) -> ir.Value:
    """A binary scalar operator of ir/expr.py on two values of `dtype`."""
    if op in ("<", "<=", "==", "!=", ">", ">="):
        if dtype.is_float:
            return b.fcmp_ordered(op, x, y)
        return (b.icmp_signed if dtype.is_signed else b.icmp_unsigned)(op, x, y)
    if dtype.is_float:
        if op in _FLOAT_OPS:
            return getattr(b, _FLOAT_OPS[op])(x, y)
        if op in ("min", "max"):
            name = "llvm.minimum" if op == "min" else "llvm.maximum"
            return b.call(intrinsic(b, name, x.type, [x.type], [x.type, x.type]), [x, y])
        raise VMError(f"operator {op} on floats is not supported by the GPU backend yet")
    if op in _INT_OPS:
        return getattr(b, _INT_OPS[op])(x, y)
    if op == ">>":
        return b.ashr(x, y) if dtype.is_signed else b.lshr(x, y)
    if op in ("min", "max"):
        pick = b.icmp_signed("<" if op == "min" else ">", x, y) if dtype.is_signed else \
            b.icmp_unsigned("<" if op == "min" else ">", x, y)
        return b.select(pick, x, y)
    if op in ("//", "%", "cdiv"):
        return _floor_div_mod(b, op, x, y, dtype)
    raise VMError(f"operator {op} is not supported by the GPU backend yet")


def _floor_div_mod(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value,
                   dtype: DataType) -> ir.Value:
    """Python's `//`, `%` and ceiling division on integers, wrapped to `dtype` as the
    interpreter wraps them (the quotient lo // -1 is lo). LLVM leaves a zero divisor and
    lo / -1 undefined (x86 traps on both), so a divisor that is not a constant is
    replaced by 1 where it is 0 or -1: y = 0 then gives some value (the interpreter
    rejects it; docs/language.md), never undefined behaviour, and -1 is handled apart."""
    zero = ir.Constant(x.type, 0)
    if not dtype.is_signed:
        if not isinstance(y, ir.Constant):
            y = b.select(b.icmp_unsigned("==", y, zero), ir.Constant(x.type, 1), y)
        if op == "cdiv":  # the quotient, plus one where it left a remainder
            rest = b.icmp_unsigned("!=", b.urem(x, y), zero)
            return b.add(b.udiv(x, y), b.zext(rest, x.type))
        return b.udiv(x, y) if op == "//" else b.urem(x, y)
    minus_one = None
    if not isinstance(y, ir.Constant):
        minus_one = b.icmp_signed("==", y, ir.Constant(x.type, -1))
        unsafe = b.or_(minus_one, b.icmp_signed("==", y, zero))
        y = b.select(unsafe, ir.Constant(x.type, 1), y)
    q, r = b.sdiv(x, y), b.srem(x, y)
    if minus_one is not None:  # x // -1 = -x (wrapping at lo), x % -1 = 0
        q = b.select(minus_one, b.neg(x), q)
    # C truncates toward zero; Python floors and ceils. Where the remainder is not zero,
    # the floor is one below the truncated quotient when the operands' signs differ (the
    # remainder's sign differs from y's), and the ceiling is one above when they agree.
    inexact = b.icmp_signed("!=", r, zero)
    signs_differ = b.icmp_signed("!=", b.icmp_signed("<", r, zero),
                                 b.icmp_signed("<", y, zero))
    if op == "cdiv":
        return b.add(q, b.zext(b.and_(inexact, b.not_(signs_differ)), x.type))
    adjust = b.and_(inexact, signs_differ)
    if op == "//":
        return b.sub(q, b.zext(adjust, x.type))
    return b.select(adjust, b.add(r, y), r)


_TILE_BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/", "min": "min", "max": "max",
                "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>", "mod": "%",
                "lt": "<", "le": "<=", "eq": "==", "ne": "!=", "gt": ">", "ge": ">="}


# f16/bf16 operations the GPU does natively with the interpreter's result. The
# interpreter computes an f16/bf16 op in f32 and rounds once; for +, -, * (and min, max,
# comparisons, which do not round) that double rounding is innocuous, because f32 has at
# least 2p + 2 significand bits (24 >= 2 * 11 + 2 for f16, >= 2 * 8 + 2 for bf16): the
# result is the correctly rounded one, which `add/sub/mul.rn.f16(x2)` compute directly.
_NATIVE_HALF_OPS = frozenset({"add", "sub", "mul", "fma", "min", "max", "neg", "abs",
                              "lt", "le", "eq", "ne", "gt", "ge"})


def pairs_half_op(op: str, dtype: DataType) -> bool:
    """Whether `tile_op` computes `op` on two f16/bf16 values as one `<2 x ...>`
    operation (PTX `add/sub/mul/fma.rn.f16x2`, `bf16x2`): the native arithmetic."""
    return dtype.name in ("f16", "bf16") and op in ("add", "sub", "mul", "fma")


def tile_op(b: ir.IRBuilder, op: str, args: list[ir.Value], dtype: DataType) -> ir.Value:
    """One element of an `elementwise` instruction. f16/bf16 arithmetic gives the
    interpreter's result (computed in f32, rounded once): natively where that is the
    same (`_NATIVE_HALF_OPS`), else in f32."""
    widen = dtype.is_float and dtype.bits == 16 and op not in _NATIVE_HALF_OPS
    if widen:
        args = [b.fpext(a, ir.FloatType()) for a in args]
        compute = F32
    else:
        compute = dtype
    if op == "fma":  # one rounding: PTX fma.rn (f32, f16, bf16 and their pairs)
        result = b.call(intrinsic(b, "llvm.fma", args[0].type, [args[0].type],
                                  [args[0].type] * 3), args)
    elif len(args) == 2:
        # `div` is the interpreter's: true division of floats, floor division of integers.
        scalar = "//" if op == "div" and not compute.is_float else _TILE_BINARY[op]
        result = scalar_binary(b, scalar, args[0], args[1], compute)
    else:
        result = _tile_unary(b, op, args[0], compute)
    if widen and op not in ("lt", "le", "eq", "ne", "gt", "ge"):
        result = b.fptrunc(result, llvm_type(dtype))
    return result


def _tile_unary(b: ir.IRBuilder, op: str, x: ir.Value, dtype: DataType) -> ir.Value:
    if op == "neg":
        return b.fneg(x) if dtype.is_float else b.neg(x)
    if op == "not":
        return b.not_(x)
    if op == "abs":
        if dtype.is_float:
            return b.call(intrinsic(b, "llvm.fabs", x.type, [x.type]), [x])
        return b.select(b.icmp_signed("<", x, ir.Constant(x.type, 0)), b.neg(x), x)
    if str(x.type) == "float" and op in ("exp", "log", "log2"):
        return _approx_f32(b, op, x)  # NVPTX has no lowering of llvm.exp/log/log2.f32
    names = {"exp": "llvm.exp", "exp2": "llvm.exp2", "log": "llvm.log", "log2": "llvm.log2",
             "sqrt": "llvm.sqrt"}
    if op in names:
        return b.call(intrinsic(b, names[op], x.type, [x.type]), [x])
    if op == "rsqrt":
        root = b.call(intrinsic(b, "llvm.sqrt", x.type, [x.type]), [x])
        return b.fdiv(ir.Constant(x.type, 1.0), root)
    raise VMError(f"elementwise {op} is not supported by the GPU backend yet")


_LOG2E_HI, _LOG2E_LO = 1.44269502162933349609375, 1.925963033500011e-08  # f32 hi + lo
_LN2 = 0.693147182464599609375  # ln 2 rounded to f32


def _approx_f32(b: ir.IRBuilder, op: str, x: ir.Value) -> ir.Value:
    """exp, log, log2 of an f32 through PTX `ex2.approx.f32` / `lg2.approx.f32` (relative
    error about 2^-22). exp(x) = 2^t * 2^e with t = x*log2(e) rounded and e its rounding
    error (an fma and the low part of log2(e)); 2^e ~ 1 + e*ln2 is one more fma. Where e is
    not finite (x = +-inf or NaN) or 2^t overflows, 2^t is the answer (0, inf or NaN):
    the fma would make inf * (e*ln2 < 0) + inf, a NaN, for half the x past 88.7."""
    f32 = x.type
    if op in ("log", "log2"):
        fn = b.module.globals.get("llvm.nvvm.lg2.approx.f") or ir.Function(
            b.module, ir.FunctionType(f32, [f32]), "llvm.nvvm.lg2.approx.f")
        value = b.call(fn, [x])
        return b.fmul(value, ir.Constant(f32, _LN2)) if op == "log" else value
    fma = intrinsic(b, "llvm.fma", f32, [f32], [f32, f32, f32])
    t = b.fmul(x, ir.Constant(f32, _LOG2E_HI))
    e = b.call(fma, [x, ir.Constant(f32, _LOG2E_HI), b.fneg(t)])
    e = b.fadd(e, b.fmul(x, ir.Constant(f32, _LOG2E_LO)))
    p = b.call(intrinsic(b, "llvm.exp2", f32, [f32]), [t])
    refined = b.call(fma, [p, b.fmul(e, ir.Constant(f32, _LN2)), p])
    finite = b.and_(b.fcmp_ordered("ord", e, e),
                    b.fcmp_ordered("<", p, ir.Constant(f32, math.inf)))
    return b.select(finite, refined, p)
