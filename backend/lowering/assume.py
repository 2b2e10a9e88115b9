"""Lowering of `assume`: `llvm.assume(cond)`. (The divisibility facts the lowering
passes take from assumes are in backend/divisibility.py.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.ir as ir

from tilevm.backend.arith import I1
from tilevm.ir import instructions as ins

if TYPE_CHECKING:
    from tilevm.backend.codegen import KernelCodegen


def lower_assume(cg: KernelCodegen, inst: ins.Assume) -> None:
    fn = cg.module.globals.get("llvm.assume") or ir.Function(
        cg.module, ir.FunctionType(ir.VoidType(), [I1]), "llvm.assume")
    cg.b.call(fn, [cg.expr(inst.cond)])
