"""Lowering of register-tile computation: `full`, `arange`, `assign`, `cast`,
`elementwise`, `where`. Each is one operation per register, on values the operands hold
in the same thread (`KernelContext.operand_values` maps broadcast operands)."""

from __future__ import annotations

import llvmlite.ir as ir

from tilevm.backend.analysis.packing import is_packed
from tilevm.backend.llvm.arith import (
    convert_packed,
    convert_scaled,
    convert_value,
    pairs_half_op,
    tile_op,
)
from tilevm.backend.llvm.context import KernelContext
from tilevm.backend.llvm.types import I32, I64, build_vector
from tilevm.dtypes import parse
from tilevm.ir import instructions as ins
from tilevm.ir.types import Tensor

INT64 = parse("int64")


def lower_full(cg: KernelContext, inst: ins.Full) -> None:
    if cg.wgmma is not None and cg.wgmma.define_zero(cg, inst):
        return  # a zero accumulator of wgmmas: a flag, no registers (see wgmma.py)
    value = cg.expr(inst.value, inst.out.dtype)
    cg.define(inst.out, [value] * cg.layout_of(inst.out).local_size)


def lower_arange(cg: KernelContext, inst: ins.Arange) -> None:
    # Element l of thread t sits at `global_index(t, 0) + global_index(0, l)` (the
    # context's docstring): its index along dim is the thread's part (a few integer ops
    # on %tid, emitted once per layout) plus a constant.
    layout = cg.layout_of(inst.out)
    base = cg.thread_part(layout)[inst.dim]
    cg.define(inst.out, [
        convert_value(cg.b, cg.b.add(base, ir.Constant(I64, local[inst.dim])), INT64,
                      inst.out.dtype)
        for local in cg.local_parts(layout)])


def lower_assign(cg: KernelContext, inst: ins.Assign) -> None:
    if inst.dst.layout != inst.src.layout:
        raise cg.fail("assign between tiles of different layouts is not supported yet")
    registers = cg.register_words(inst.src) if is_packed(inst.src.dtype) else \
        cg.register_values(inst.src)
    for slot, value in zip(cg.tensors[inst.dst.name], registers):
        cg.b.store(value, slot)
    if cg.wgmma is not None:
        cg.wgmma.assign(cg, inst)


def lower_cast(cg: KernelContext, inst: ins.Cast) -> None:
    src, out = inst.src, inst.out
    if not is_packed(src.dtype):
        cg.define(out, [convert_scaled(cg.b, v, src.dtype, out.dtype, inst.exponent)
                        for v in cg.operand_values(src, out)])
        return
    if inst.lowering is None:
        raise cg.fail("a cast from packed codes has no conversion form (run the "
                      "lower_bit_packing pass)")
    if inst.lowering.name == "free":  # the same type and layout: the same words
        cg.define_words(out, cg.register_words(src))
        return
    # Convert the source's codes in its own order, straight out of its words (two per
    # float op), then give each of `out`'s elements its value: the same list when the
    # layouts agree, else the thread's own elements reordered or broadcast
    # (`broadcast_map`; a permutation inside the thread costs nothing).
    values = convert_packed(cg.b, cg.register_words(src), cg.layout_of(src).local_size,
                            src.dtype, out.dtype, inst.exponent)
    if src.type.shape != out.type.shape or src.layout != out.layout:
        values = [values[i] for i in cg.broadcast_map(src, out)]
    cg.define(out, values)

def lower_elementwise(cg: KernelContext, inst: ins.Elementwise) -> None:
    dtype = next(a.dtype for a in inst.args if isinstance(a, Tensor))
    operands = [cg.operand_values(a, inst.out) if isinstance(a, Tensor) else
                [cg.expr(a, dtype)] * cg.layout_of(inst.out).local_size
                for a in inst.args]
    count = len(operands[0])
    if not (count % 2 == 0 and pairs_half_op(inst.op, dtype)):
        cg.define(inst.out, [tile_op(cg.b, inst.op, [o[i] for o in operands], dtype)
                             for i in range(count)])
        return
    # Registers 2i and 2i + 1 go through one f16x2 / bf16x2 operation: the pairs an mma
    # operand and a vector access hold in one 32-bit register (two scalar operations
    # would make ptxas pair them again, re-packing halves with `prmt`). A broadcast
    # operand is the same value in both halves.
    pair_type = ir.VectorType(operands[0][0].type, 2)
    values = []
    for i in range(0, count, 2):
        pair = tile_op(cg.b, inst.op, [build_vector(cg.b, o[i:i + 2], pair_type)
                                       for o in operands], dtype)
        values += [cg.b.extract_element(pair, ir.Constant(I32, j)) for j in (0, 1)]
    cg.define(inst.out, values)

def lower_where(cg: KernelContext, inst: ins.Where) -> None:
    dtype = inst.out.dtype
    cond = cg.operand_values(inst.cond, inst.out)
    x = cg.operand_values(inst.x, inst.out) if isinstance(inst.x, Tensor) else \
        [cg.expr(inst.x, dtype)] * len(cond)
    y = cg.operand_values(inst.y, inst.out) if isinstance(inst.y, Tensor) else \
        [cg.expr(inst.y, dtype)] * len(cond)
    cg.define(inst.out, [cg.b.select(c, a, o) for c, a, o in zip(cond, x, y)])
