"""Lowering of the instructions whose scalar result one thread computes and hands to the
whole block: `atomic_add` and `globaltimer`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import llvmlite.ir as ir

from tilevm.backend.llvm.context import KernelContext
from tilevm.backend.llvm.lowering.barrier import emit_barrier
from tilevm.backend.llvm.shared_buffer import shared_scratch
from tilevm.backend.llvm.types import I1, I32, I64, PTR
from tilevm.ir import instructions as ins
from tilevm.ir.expr import Expr
from tilevm.ir.types import Tensor


def lower_atomic_add(cg: KernelContext, inst: ins.AtomicAdd) -> None:
    """Thread 0 adds (`from_thread0`). The barrier before it orders every thread's
    earlier writes before the addition, which releases them at GPU scope
    (`atom.acq_rel.gpu`); its acquire, and the barrier after it, order the block's later
    reads after the additions it saw. An element outside `dst` adds nothing (the result
    is 0; the interpreter reports it as an error)."""
    b = cg.b
    index, inside = int32_element(cg, inst.dst, inst.offsets)
    value = cg.expr(inst.value, inst.out.dtype)
    atom = ir.InlineAsm(ir.FunctionType(I32, [PTR, I32]),
                        "atom.acq_rel.gpu.add.u32 $0, [$1], $2;", "=r,l,r,~{memory}",
                        side_effect=True)

    def add() -> ir.Value:
        ptr = b.gep(cg.tensors[inst.dst.name].base, [index], source_etype=I32)
        with b.if_else(inside) as (then, otherwise):
            with then:
                old = b.call(atom, [ptr, value])
                added = b.block
            with otherwise:
                skipped = b.block
        result = b.phi(I32)
        result.add_incoming(old, added)
        result.add_incoming(ir.Constant(I32, 0), skipped)
        return result

    cg.scalars[inst.out.name] = from_thread0(cg, I32, add)


def lower_globaltimer(cg: KernelContext, inst: ins.GlobalTimer) -> None:
    """Thread 0 reads `%globaltimer` (`from_thread0`)."""
    timer = ir.InlineAsm(ir.FunctionType(I64, []), "mov.u64 $0, %globaltimer;", "=l",
                         side_effect=True)
    cg.scalars[inst.out.name] = from_thread0(cg, I64, lambda: cg.b.call(timer, []))


def from_thread0(cg: KernelContext, ty: ir.Type, compute: Callable[[], ir.Value]
                 ) -> ir.Value:
    """A value thread 0 computes, handed to every thread of the block through the
    shared scratch word (`SharedPlan.scratch_offset`), between two barriers."""
    b = cg.b
    slot = shared_scratch(cg)
    emit_barrier(cg)
    with b.if_then(b.icmp_unsigned("==", cg.tid, ir.Constant(I32, 0))):
        b.store(compute(), slot)
    emit_barrier(cg)
    return b.load(slot, typ=ty)


def int32_element(cg: KernelContext, tensor: Tensor, offsets: Sequence[Expr]
                  ) -> tuple[ir.Value, ir.Value]:
    """The index of the int32 element `tensor[offsets]` of global memory (an atomic
    counter, a semaphore: `tile_sync`) in its view's base pointer, and whether it lies
    inside the view."""
    b = cg.b
    view = cg.tensors[tensor.name]
    index, inside = view.offset, ir.Constant(I1, 1)
    for o, extent, stride in zip(offsets, view.shape, view.strides):
        coord = cg.i64(o)
        inside = b.and_(inside, b.and_(b.icmp_signed(">=", coord, ir.Constant(I64, 0)),
                                       b.icmp_signed("<", coord, extent)))
        index = b.add(index, b.mul(coord, stride))
    return index, inside
