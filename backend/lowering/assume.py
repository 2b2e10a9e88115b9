"""Lowering of `assume`, and the facts codegen takes from it.

An `assume` becomes `llvm.assume(cond)`. Before lowering, codegen asks
`assumed_divisors` for the divisibility facts of the assumes at the top level of the
program body: such an assume is reached by every thread before the kernel returns, and
a kernel parameter never changes, so `n % 8 == 0` there makes 8 a divisor of `n`
everywhere in the kernel (`KernelCodegen.divisor`), which can prove vector accesses of
rows with stride `n` aligned. Facts about anything but scalar parameters, and assumes
nested in loops or branches, are not used (beyond `llvm.assume`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import llvmlite.ir as ir

from tilevm.backend.arith import I1
from tilevm.dtypes import DataType
from tilevm.ir import instructions as ins
from tilevm.ir.expr import BOOL, Binary, Const, Expr, Var
from tilevm.ir.stmt import Program

if TYPE_CHECKING:
    from tilevm.backend.codegen import KernelCodegen


def lower_assume(cg: KernelCodegen, inst: ins.Assume) -> None:
    fn = cg.module.globals.get("llvm.assume") or ir.Function(
        cg.module, ir.FunctionType(ir.VoidType(), [I1]), "llvm.assume")
    cg.b.call(fn, [cg.expr(inst.cond)])


def assumed_divisors(program: Program) -> dict[str, int]:
    """Scalar parameter name -> a number the top-level assumes prove divides it."""
    params = {p for p in program.params if isinstance(p, Var)}
    found: dict[str, int] = {}
    for stmt in program.body.body:
        if isinstance(stmt, ins.Assume):
            for name, c in _facts(stmt.cond, params):
                found[name] = math.lcm(found.get(name, 1), c)
    return found


def _facts(cond: Expr, params: set[Var]) -> list[tuple[str, int]]:
    """(x, c) for each `x % c == 0` (or `x & (c - 1) == 0`, c a power of two) that
    `cond` implies, through `and` and bool `&`."""
    if not isinstance(cond, Binary):
        return []
    if cond.op == "and" or (cond.op == "&" and cond.dtype == BOOL):
        return _facts(cond.lhs, params) + _facts(cond.rhs, params)
    if cond.op != "==":
        return []
    lhs, rhs = cond.lhs, cond.rhs
    if _is_zero(lhs):
        lhs, rhs = rhs, lhs
    if not (_is_zero(rhs) and isinstance(lhs, Binary) and isinstance(lhs.lhs, Var)
            and lhs.lhs in params and isinstance(lhs.rhs, Const)):
        return []
    x, c, dtype = lhs.lhs, lhs.rhs, lhs.dtype
    if not (x.dtype.is_integer and c.dtype.is_integer and dtype.is_integer) \
            or isinstance(c.value, float):
        return []
    value = int(c.value)
    if not 0 < value < 1 << 31:
        return []
    if lhs.op == "&":
        value += 1  # x & (2^k - 1) == 0: 2^k divides x
        if value & (value - 1):
            return []
    elif lhs.op != "%":
        return []
    # The test is done in `dtype`; it says something of x only if x converts to it
    # exactly, or if c divides 2^bits (then wrapping keeps the remainder).
    if not (_exact(x.dtype, dtype) or (value & (value - 1) == 0 and value.bit_length()
                                       <= dtype.bits)):
        return []
    return [(x.name, value)]


def _is_zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.dtype.is_integer and e.value == 0


def _exact(src: DataType, dst: DataType) -> bool:
    """Every value of the integer type `src` is a value of `dst`."""
    if src == dst:
        return True
    if src.is_signed:
        return dst.is_signed and dst.bits >= src.bits
    return dst.bits > src.bits if dst.is_signed else dst.bits >= src.bits
