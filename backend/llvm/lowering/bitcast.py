"""Lowering of `view`: reinterpret the bits a thread holds, for any element widths.

A thread's bits are the concatenation of its src locals, element `l` at bits
`[l*b, (l+1)*b)` (`layouts.register_bits`); `out`'s element `j` is the field
`[j*b', (j+1)*b')`. Tiles of elements of 8 bits or fewer are held as exactly those bits,
packed in i32 words (pass `lower_bit_packing`), so a view between two of them is free:
`out` gets `src`'s words. Wider elements are one LLVM value each (`types.llvm_type`),
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

from tilevm.backend.llvm.bits import extract_bits, from_bits, pack_words, to_bits
from tilevm.backend.llvm.context import KernelContext
from tilevm.ir import instructions as ins
from tilevm.layouts.errors import LayoutError
from tilevm.layouts.register_bits import check_view


def lower_view(cg: KernelContext, inst: ins.View) -> None:
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
