"""Lowering of tile-level synchronization: `tile_post` and `tile_wait` on int32
semaphores in global memory (docs/tile-sync.md), as cuSync does it.

- `tile_post`: a barrier (every thread's writes of the tile are done), then thread 0
  `fence.acq_rel.gpu` (its view of the block's writes, which the barrier gave it, made
  visible at GPU scope) and `red.relaxed.gpu.global.add.s32`: a fence then a relaxed
  write is the PTX memory model's release pattern (`red.release` after the fence would
  fence twice; docs/tile-sync.md has what that cost).
- `tile_wait`: thread 0 spins on `ld.acquire.gpu.global.s32` until
  `(int32)(value - expected) >= 0`, sleeping between tries (`nanosleep`, doubling from
  `FIRST_SLEEP_NS` up to `LONGEST_SLEEP_NS`), then a barrier hands what it acquired to
  the block: no thread reads a producer's tile before the wait returns.

Both inline-assembly statements clobber memory, so LLVM moves no load or store across
them. Loads of global memory are plain `ld.global` (no kernel parameter is marked
`noalias`/`readonly`, so LLVM never selects the non-coherent `ld.global.nc`, which
could return a line cached before the producer wrote it). An element outside `sem`
posts and waits for nothing (the interpreter reports it as an error).
"""

from __future__ import annotations

import llvmlite.ir as ir

from tilevm.backend.llvm.context import KernelContext
from tilevm.backend.llvm.lowering.atomic import int32_element
from tilevm.backend.llvm.lowering.barrier import emit_barrier
from tilevm.backend.llvm.types import I32, PTR
from tilevm.ir import instructions as ins

FIRST_SLEEP_NS = 32
LONGEST_SLEEP_NS = 1024


def lower_tile_post(cg: KernelContext, inst: ins.TilePost) -> None:
    b = cg.b
    ptr, inside = _element(cg, inst)
    value = cg.expr(inst.value, inst.sem.dtype)
    emit_barrier(cg)
    with b.if_then(b.and_(inside, _thread0(cg))):
        _asm(cg, "fence.acq_rel.gpu;", [], [])
        _asm(cg, "red.relaxed.gpu.global.add.s32 [$0], $1;", [PTR, I32], [ptr, value],
             "l,r")


def lower_tile_wait(cg: KernelContext, inst: ins.TileWait) -> None:
    b = cg.b
    ptr, inside = _element(cg, inst)
    expected = cg.expr(inst.expected, inst.sem.dtype)
    load = ir.InlineAsm(ir.FunctionType(I32, [PTR]), "ld.acquire.gpu.global.s32 $0, [$1];",
                        "=r,l,~{memory}", side_effect=True)
    with b.if_then(b.and_(inside, _thread0(cg))):
        entry = b.block
        spin = b.append_basic_block("tile_wait.spin")
        sleep = b.append_basic_block("tile_wait.sleep")
        done = b.append_basic_block("tile_wait.done")
        b.branch(spin)
        b.position_at_end(spin)
        wait_ns = b.phi(I32)
        wait_ns.add_incoming(ir.Constant(I32, FIRST_SLEEP_NS), entry)
        reached = b.icmp_signed(">=", b.sub(b.call(load, [ptr]), expected),
                                ir.Constant(I32, 0))
        b.cbranch(reached, done, sleep)
        b.position_at_end(sleep)
        _asm(cg, "nanosleep.u32 $0;", [I32], [wait_ns], "r")
        longer = b.shl(wait_ns, ir.Constant(I32, 1))
        capped = b.select(b.icmp_unsigned("<", longer, ir.Constant(I32, LONGEST_SLEEP_NS)),
                          longer, ir.Constant(I32, LONGEST_SLEEP_NS))
        wait_ns.add_incoming(capped, sleep)
        b.branch(spin)
        b.position_at_end(done)
    emit_barrier(cg)


def _element(cg: KernelContext, inst: ins.TilePost | ins.TileWait
             ) -> tuple[ir.Value, ir.Value]:
    """The semaphore element's address, and whether it lies inside `sem`."""
    index, inside = int32_element(cg, inst.sem, inst.offsets)
    return cg.b.gep(cg.tensors[inst.sem.name].base, [index], source_etype=I32), inside


def _thread0(cg: KernelContext) -> ir.Value:
    return cg.b.icmp_unsigned("==", cg.tid, ir.Constant(I32, 0))


def _asm(cg: KernelContext, text: str, types: list[ir.Type], args: list[ir.Value],
         constraints: str = "") -> None:
    clobbers = ",".join(filter(None, [constraints, "~{memory}"]))
    asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), types), text, clobbers,
                       side_effect=True)
    cg.b.call(asm, args)
