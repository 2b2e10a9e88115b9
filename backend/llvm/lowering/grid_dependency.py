"""Lowering of programmatic dependent launch: `launch_dependents` and
`wait_prerequisites`.

On targets that have it (`Target.dependent_launch`: sm_90 and later, PTX ISA 7.8),
`select_instructions` records `lowering=griddepcontrol` and each is one inline PTX
instruction: `griddepcontrol.launch_dependents;` and `griddepcontrol.wait;`. The wait
clobbers memory, so LLVM moves no load or store of global memory above it (a load
hoisted above the wait could read what the previous kernel has not written yet). On
earlier targets the instructions keep no lowering and emit nothing: there a kernel is
never launched before the previous one ends, so there is nothing to wait for."""

from __future__ import annotations

import llvmlite.ir as ir

from tilevm.backend.llvm.context import KernelContext
from tilevm.ir import instructions as ins

GRIDDEPCONTROL = "griddepcontrol"  # the `lowering` name select_instructions records


def lower_launch_dependents(cg: KernelContext, inst: ins.LaunchDependents) -> None:
    if _selected(inst):
        _emit(cg, "griddepcontrol.launch_dependents;", "")


def lower_wait_prerequisites(cg: KernelContext, inst: ins.WaitPrerequisites) -> None:
    if _selected(inst):
        _emit(cg, "griddepcontrol.wait;", "~{memory}")


def _selected(inst: ins.Instruction) -> bool:
    return inst.lowering is not None and inst.lowering.name == GRIDDEPCONTROL


def _emit(cg: KernelContext, text: str, clobbers: str) -> None:
    asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, clobbers,
                       side_effect=True)
    cg.b.call(asm, [])
