"""Facts about a program's statements that the cost model's walk needs: every
statement and the scalar expressions each reads, and which grid axes (`block_idx`) an
expression or a scalar variable depends on."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from tilevm.ir.expr import Binary, BlockIndex, Expr, ScalarCast, Select, Unary, Var, free_vars
from tilevm.ir.instructions import GlobalView, Instruction
from tilevm.ir.stmt import AssignVar, For, If, Let, Program, Stmt
from tilevm.ir.transform import nested_statements

__all__ = ["statement_exprs", "direct_axes", "program_axes", "expr_axes",
           "variable_axes"]


def statement_exprs(stmt: Stmt) -> Iterator[Expr]:
    """The scalar expressions one statement reads (not those of statements inside it)."""
    if isinstance(stmt, For):
        yield from (stmt.start, stmt.stop, stmt.step)
    elif isinstance(stmt, If):
        yield stmt.cond
    elif isinstance(stmt, (Let, AssignVar)):
        yield stmt.value
    elif isinstance(stmt, Instruction):
        if isinstance(stmt, GlobalView):
            yield from (s for s in stmt.out.type.shape if isinstance(s, Expr))
        for value in stmt.operands():
            for item in value if isinstance(value, tuple) else (value,):
                if isinstance(item, Expr):
                    yield item


def direct_axes(e: Expr) -> set[int]:
    """The block index axes an expression reads."""
    if isinstance(e, BlockIndex):
        return {e.axis}
    if isinstance(e, Binary):
        return direct_axes(e.lhs) | direct_axes(e.rhs)
    if isinstance(e, (Unary, ScalarCast)):
        return direct_axes(e.operand)
    if isinstance(e, Select):
        return direct_axes(e.cond) | direct_axes(e.if_true) | direct_axes(e.if_false)
    return set()


def program_axes(program: Program) -> set[int]:
    """The grid axes whose block index any expression of the program reads."""
    return {axis for stmt in nested_statements(program.body) for e in statement_exprs(stmt)
            for axis in direct_axes(e)}


def expr_axes(e: Expr, var_axes: Mapping[Var, set[int]]) -> set[int]:
    """The block index axes an expression reads, directly or through variables."""
    found = direct_axes(e)
    for var in free_vars(e):
        found |= var_axes.get(var, set())
    return found


def variable_axes(statements: list[Stmt]) -> dict[Var, set[int]]:
    """The block index axes each scalar variable's value may depend on: through `let`s,
    assignments and loop bounds; all three for a scalar an instruction defines (an
    `atomic_add`'s old value, a `globaltimer`)."""
    var_axes: dict[Var, set[int]] = {}
    changed = True
    while changed:
        changed = False
        for stmt in statements:
            if isinstance(stmt, (Let, AssignVar, For)):
                var = stmt.var
                axes = set().union(*(expr_axes(e, var_axes) for e in statement_exprs(stmt)))
            elif isinstance(stmt, Instruction) and stmt.defines is not None:
                var, axes = stmt.defines, {0, 1, 2}  # (an atomic's old value, a timer)
            else:
                continue
            if not axes <= var_axes.get(var, set()):
                var_axes[var] = var_axes.get(var, set()) | axes
                changed = True
    return var_axes
