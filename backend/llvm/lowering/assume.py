"""Lowering of `assume`: `llvm.assume(cond)`. (The divisibility facts the lowering
passes take from assumes are in backend/analysis/divisibility.py.)"""

from __future__ import annotations

import llvmlite.ir as ir

from tilevm.backend.llvm.context import KernelContext
from tilevm.backend.llvm.types import I1
from tilevm.ir import instructions as ins


def lower_assume(cg: KernelContext, inst: ins.Assume) -> None:
    fn = cg.module.globals.get("llvm.assume") or ir.Function(
        cg.module, ir.FunctionType(ir.VoidType(), [I1]), "llvm.assume")
    cg.b.call(fn, [cg.expr(inst.cond)])
