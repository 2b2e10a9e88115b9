"""Lowering of `view`: reinterpret the bits a thread holds, for any element widths.

A thread's bits are the concatenation of its src locals, element `l` at bits
`[l*b, (l+1)*b)` (`layouts.register_bits`); `out`'s element `j` is the field
`[j*b', (j+1)*b')`. Tiles of elements of 8 bits or fewer are held as exactly those bits,
packed in i32 words (pass `lower_bit_packing`), so a view between two of them is free:
`out` gets `src`'s words. Wider elements are one LLVM value each (`arith.llvm_type`),
and the form the pass chose says how bits move (`pack`, `unpack`, `bitcast`, `repack`).

All offsets are compile-time constants, so the lowering is plain integer code: the src
elements are OR-ed (each masked to its b bits, shifted into place) into 32-bit words,
and each out element is cut out of the one, two (a 3-, 5-, 6- or 7-bit code straddling
a word boundary) or more words it overlaps, by shifts, ands and ors; LLVM folds it to
moves, `prmt`, `shf`/`bfe` or nothing (a view that keeps the element width and the
order of the locals is a plain bitcast per element).

Out values follow the register convention: a signed sub-byte integer is sign-extended
into its i8 (so that integer casts and arithmetic see its value; the conversion rules
read only its low b bits), an unsigned one is zero-extended, a float code sits in the
low bits of its i8 with zeros above.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.ir as ir

from tilevm.backend.arith import I32, llvm_type
from tilevm.dtypes import DataType
from tilevm.ir import instructions as ins
from tilevm.layouts.errors import LayoutError
from tilevm.layouts.register_bits import check_view

if TYPE_CHECKING:
    from tilevm.backend.codegen import KernelCodegen

WORD = 32


def lower_view(cg: KernelCodegen, inst: ins.View) -> None:
    src, out = inst.src, inst.out
    src_layout, out_layout = cg.layout_of(src), cg.layout_of(out)
    try:
        check_view(src_layout, src.dtype.bits, out_layout, out.dtype.bits)
    except LayoutError as err:
        raise cg.fail(str(err)) from None
    form = inst.lowering.name if inst.lowering is not None else None
    if form is None:
        raise cg.fail("view has no bit-movement form (run the lower_bit_packing pass)")
    if form == "free":  # both packed: the thread's bit string is the same words
        cg.define_words(out, cg.register_words(src))
        return
    sb, ob = src.dtype.bits, out.dtype.bits
    if form == "bitcast":  # element l keeps its bits: one (free) bitcast per element
        cg.define(out, [from_bits(cg.b, to_bits(cg.b, v, src.dtype), out.dtype)
                        for v in cg.register_values(src)])
        return
    words = cg.register_words(src) if form == "unpack" else \
        pack_words(cg.b, [to_bits(cg.b, v, src.dtype) for v in cg.register_values(src)], sb)
    if form == "pack":
        cg.define_words(out, words)
        return
    count = out_layout.local_size  # unpack, repack: cut each element out of the words
    cg.define(out, [from_bits(cg.b, extract_bits(cg.b, words, j * ob, ob), out.dtype)
                    for j in range(count)])


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
