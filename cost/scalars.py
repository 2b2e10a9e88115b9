"""Scalar expressions made into Python functions once, for the cost model's walks, which
evaluate the same offsets and loop bounds for many blocks and iterations.

The semantics are ir/evaluate.py's (its `scalar_binary`, `scalar_unary`,
`convert_scalar` and `evaluate` of a constant); what is done once here is the walk of
the tree: each node's type (a `Binary`'s is recomputed from its operands on every
access) and each constant's value.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

from tilevm.dtypes import DataType
from tilevm.ir.errors import VMError
from tilevm.ir.evaluate import convert_scalar, evaluate, scalar_binary, scalar_unary
from tilevm.ir.expr import Binary, BlockIndex, Const, Expr, ScalarCast, Select, Unary, Var

Scalar = int | float
Lookup = Callable[[Var], Scalar]
Compiled = Callable[[Lookup, tuple[int, int, int]], Scalar]


class CompiledExprs:
    """`compiled(e)`: the function computing `e` from a variable lookup and the block
    index, made once per expression object (kept alive with it, so ids stay unique)."""

    def __init__(self) -> None:
        self._made: dict[int, tuple[Expr, Compiled]] = {}

    def compiled(self, e: Expr) -> Compiled:
        found = self._made.get(id(e))
        if found is None:
            found = self._made[id(e)] = (e, compile_expr(e))
        return found[1]


def compile_expr(e: Expr) -> Compiled:
    """A function equal to `lambda lookup, block: evaluate(e, lookup, block)`."""
    if isinstance(e, Const):
        try:
            value = evaluate(e, _no_variable)
        except VMError as err:
            return _raiser(err)
        return lambda lookup, block: value
    if isinstance(e, Var):
        return lambda lookup, block: lookup(e)
    if isinstance(e, BlockIndex):
        if not 0 <= e.axis <= 2:
            return _raiser(VMError(f"block index axis {e.axis} is not 0, 1 or 2"))
        axis = e.axis
        return lambda lookup, block: block[axis]
    if isinstance(e, Binary):
        op, dtype, lhs, rhs = e.op, e.dtype, compile_expr(e.lhs), compile_expr(e.rhs)
        if op in _COMPARE:
            compare = _COMPARE[op]
            return lambda lookup, block: int(compare(lhs(lookup, block), rhs(lookup, block)))
        if not dtype.is_float and op in _INTEGER:
            return _integer_binary(op, dtype, lhs, rhs)
        return lambda lookup, block: scalar_binary(op, lhs(lookup, block),
                                                   rhs(lookup, block), dtype)
    if isinstance(e, Unary):
        op, dtype, operand = e.op, e.dtype, compile_expr(e.operand)
        return lambda lookup, block: scalar_unary(op, operand(lookup, block), dtype)
    if isinstance(e, Select):
        dtype, cond = e.dtype, compile_expr(e.cond)
        if_true, if_false = compile_expr(e.if_true), compile_expr(e.if_false)
        return lambda lookup, block: convert_scalar(
            (if_true if cond(lookup, block) else if_false)(lookup, block), dtype)
    if isinstance(e, ScalarCast):
        dtype, operand = e.dtype, compile_expr(e.operand)
        return lambda lookup, block: convert_scalar(operand(lookup, block), dtype)
    raise TypeError(f"not a scalar expression: {e!r}")


_COMPARE = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
            ">": operator.gt, ">=": operator.ge}
_INTEGER = {"+": operator.add, "-": operator.sub, "*": operator.mul, "min": min, "max": max,
            "//": operator.floordiv, "%": operator.mod, "cdiv": lambda x, y: -(-x // y)}


def _integer_binary(op: str, dtype: DataType, lhs: Compiled, rhs: Compiled) -> Compiled:
    """An integer operation without `scalar_binary`'s dispatch: the same value where
    the result is in the type's range (else, and for a zero divisor, `scalar_binary`
    decides: it wraps, or raises)."""
    apply, lo, hi = _INTEGER[op], int(dtype.min_exact), int(dtype.max_exact)
    divides = op in ("//", "%", "cdiv")

    def run(lookup: Lookup, block: tuple[int, int, int]) -> Scalar:
        x, y = int(lhs(lookup, block)), int(rhs(lookup, block))
        if divides and y == 0:
            return scalar_binary(op, x, y, dtype)
        r = apply(x, y)
        return r if lo <= r <= hi else scalar_binary(op, x, y, dtype)
    return run


def _no_variable(var: Var) -> Scalar:
    raise VMError(f"{var.name} in a constant")


def _raiser(err: VMError) -> Compiled:
    def fail(lookup: Lookup, block: tuple[int, int, int]) -> Scalar:
        raise err
    return fail
