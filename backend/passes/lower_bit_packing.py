"""Pass `lower_bit_packing`: low-bit register tiles live packed in 32-bit registers.

Expects: a program after `select_instructions`. Guarantees: codegen holds every register
tile whose elements have 8 bits or fewer (`analysis.packing.is_packed`: int1..8,
uint1..8, every float of <= 8 bits) as the i32 words of each thread's bit string, local `l` at bits
`[l*b, (l+1)*b)` of the thread's registers (the order of `layouts.register_bits` and of
`dtypes.pack`); every `view` and every `cast` from such a tile records how its bits
move:

- `view`: `lowering=free` between packed tiles: a view keeps each thread's bit string
  (`register_bits.check_view`), so the words are the same registers and no instruction
  is emitted; `pack` from wider elements into a packed tile (the elements' bits are
  OR-ed into words), `unpack` from a packed tile to wider elements (each is cut out of
  its word, or the two words it straddles), `bitcast` between wider tiles of the same
  element width, `repack` between wider tiles of different widths.
- `cast` from a packed tile to the same type and layout (a copy): `lowering=free`, the
  same words. To f16/bf16: `lowering=paired_rule(bits=b)`: codes are cut
  out of the words two at a time into the two 16-bit lanes of one i32 and converted by
  the generic rule of `dtypes.conversion` (integer ops, then ONE `<2 x half|bfloat>` float op
  per pair); the two codes lie 16 (mod 32) bits apart (`dtypes.conversion.lane_pairs`), at one
  offset of a low and a high lane: for b in {1, 2, 4, 8} in the same word, so one shift
  and one AND place both, otherwise one merge of two words serves several pairs. To f32
  or to an integer type: `lowering=per_element_rule` (one conversion per code).

A packed tile lives in `ceil(local_size * b / 32)` registers instead of `local_size`:
an int4 weight tile of 32 codes per thread is 4 registers, not 32.
"""

from __future__ import annotations

from dataclasses import replace

from tilevm.backend.analysis.packing import is_packed
from tilevm.backend.passes.context import DEFAULT_CONTEXT, PassContext
from tilevm.dtypes import DataType
from tilevm.dtypes.conversion import pairs_convert
from tilevm.ir import instructions as ins
from tilevm.ir.stmt import Program
from tilevm.ir.transform import map_instructions


def lower_bit_packing(program: Program, context: PassContext = DEFAULT_CONTEXT) -> Program:
    def choose(inst: ins.Instruction) -> ins.Instruction:
        if isinstance(inst, ins.View):
            return replace(inst, lowering=ins.lowering(view_form(inst.src.dtype,
                                                                 inst.out.dtype)))
        if isinstance(inst, ins.Cast) and is_packed(inst.src.dtype):
            if inst.src.type == inst.out.type and not inst.exponent:  # dtype, shape, layout
                form = ins.lowering("free")  # a copy (the frontend's snapshot of a tile)
            elif pairs_convert(inst.src.dtype, inst.out.dtype):
                form = ins.lowering("paired_rule", bits=inst.src.dtype.bits)
            else:
                form = ins.lowering("per_element_rule")
            return replace(inst, lowering=form)
        return inst

    return map_instructions(program, choose)


def view_form(src: DataType, out: DataType) -> str:
    """How a `view` from `src` to `out` elements moves bits (see the module docstring)."""
    if is_packed(src) and is_packed(out):
        return "free"
    if is_packed(out):
        return "pack"
    if is_packed(src):
        return "unpack"
    return "bitcast" if src.bits == out.bits else "repack"
