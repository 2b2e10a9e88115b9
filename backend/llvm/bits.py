"""A thread's bit string in LLVM IR: register values as codes, codes packed into i32
words and cut back out of them, element `l` at bits `[l*b, (l+1)*b)` (the order of
`layouts.register_bits` and `dtypes.pack`). All offsets are compile-time constants, so
this is plain integer code that LLVM folds to moves, `prmt`, `shf`/`bfe` or nothing.

Register values follow the convention of `types.llvm_type`: a signed sub-byte integer
is sign-extended into its i8, an unsigned one zero-extended, a float code sits in the
low bits of its i8 with zeros above."""

from __future__ import annotations

import llvmlite.ir as ir

from tilevm.backend.llvm.types import I32, llvm_type
from tilevm.dtypes import DataType

WORD = 32


def to_bits(b: ir.IRBuilder, value: ir.Value, dtype: DataType) -> ir.Value:
    """A register value as its dtype's `bits`-bit code in an integer of at least 32 bits
    (zeros above the code)."""
    bits = dtype.bits
    if not isinstance(value.type, ir.IntType):  # half / bfloat / float
        value = b.bitcast(value, ir.IntType(bits))
    width = max(bits, WORD)
    wide = ir.IntType(width)
    if value.type.width < width:
        value = b.zext(value, wide)
    if bits < value.type.width:  # a code in an i8 may carry sign bits above it
        value = b.and_(value, ir.Constant(wide, (1 << bits) - 1))
    return value


def from_bits(b: ir.IRBuilder, code: ir.Value, dtype: DataType) -> ir.Value:
    """A `bits`-bit code (low bits of an integer, zeros above) as dtype's register value."""
    ty = llvm_type(dtype)
    bits = dtype.bits
    if isinstance(ty, ir.IntType):
        if code.type.width > ty.width:
            code = b.trunc(code, ty)
        elif code.type.width < ty.width:
            code = b.zext(code, ty)
        if dtype.is_integer and dtype.is_signed and 1 < bits < ty.width:
            shift = ir.Constant(ty, ty.width - bits)  # sign-extend the code in its i8
            code = b.ashr(b.shl(code, shift), shift)
        return code
    as_int = ir.IntType(bits)
    if code.type.width != bits:
        code = b.trunc(code, as_int) if code.type.width > bits else b.zext(code, as_int)
    return b.bitcast(code, ty)


def pack_words(b: ir.IRBuilder, codes: list[ir.Value], bits: int) -> list[ir.Value]:
    """The i32 words of the bit array of `codes` (each `bits` wide, zeros above, in an
    integer of >= 32 bits), element l at bits [l*bits, (l+1)*bits)."""
    total = len(codes) * bits
    words = []
    for w in range(-(-total // WORD)):
        lo, hi = w * WORD, (w + 1) * WORD
        word = None
        for l in range(lo // bits, min(len(codes), -(-hi // bits))):
            start = l * bits - lo  # the element's lsb relative to the word's
            code = codes[l]
            if start >= 0:
                piece = b.shl(code, ir.Constant(code.type, start)) if start else code
            else:
                piece = b.lshr(code, ir.Constant(code.type, -start))
            if piece.type.width > WORD:
                piece = b.trunc(piece, I32)
            word = piece if word is None else b.or_(word, piece)
        words.append(word)
    return words


def extract_bits(b: ir.IRBuilder, words: list[ir.Value], offset: int, bits: int) -> ir.Value:
    """Bits [offset, offset+bits) of the bit array held in i32 `words`, as an integer of
    max(32, bits) bits with zeros above."""
    width = max(bits, WORD)
    ty = ir.IntType(width)
    value = None
    for w in range(offset // WORD, -(-(offset + bits) // WORD)):
        word = words[w] if width == WORD else b.zext(words[w], ty)
        start = w * WORD - offset  # the word's lsb relative to the field's
        if start >= 0:
            piece = b.shl(word, ir.Constant(ty, start)) if start else word
        else:
            piece = b.lshr(word, ir.Constant(ty, -start))
        value = piece if value is None else b.or_(value, piece)
    if bits < width:
        value = b.and_(value, ir.Constant(ty, (1 << bits) - 1))
    return value
