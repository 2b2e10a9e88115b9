"""Scalar expressions: the integer and float arithmetic a program does per block
(offsets, loop bounds, sizes, scalar arguments).

Expressions are frozen dataclasses compared structurally, so two programs built the
same way are equal. They deliberately do not overload Python operators (`==` must stay
structural equality); the frontend wraps them in proxies that do.

Typing: integer arithmetic is int32 unless an operand is wider; a float operand makes
the result a float (the wider float); comparisons and logical operators give `bool`
(uint1). `//` and `%` are floor division and modulo (Python's, not C's), `cdiv(a, b)` is
`ceil(a / b)`; `/` on integers is an error (write `//`).

`format_expr` is their text form (the IR text's expressions, `str(expr)`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilevm.dtypes import DataType, parse

BOOL = parse("uint1")
INT32 = parse("int32")
INT64 = parse("int64")
FLOAT32 = parse("f32")

ARITHMETIC_OPS = ("+", "-", "*", "/", "//", "%", "cdiv", "min", "max")
BITWISE_OPS = ("&", "|", "^", "<<", ">>")
COMPARISON_OPS = ("<", "<=", "==", "!=", ">", ">=")
LOGICAL_OPS = ("and", "or")
BINARY_OPS = ARITHMETIC_OPS + BITWISE_OPS + COMPARISON_OPS + LOGICAL_OPS
UNARY_OPS = ("-", "not", "~")


class Expr:
    """Base of scalar expressions; every subclass has a `dtype`."""

    dtype: DataType

    def __str__(self) -> str:
        return format_expr(self)


@dataclass(frozen=True)
class Const(Expr):
    value: int | float | bool
    dtype: DataType


@dataclass(frozen=True)
class Var(Expr):
    """A named scalar: a kernel parameter, a loop variable or a `let`."""

    name: str
    dtype: DataType


@dataclass(frozen=True)
class BlockIndex(Expr):
    """The index of this thread block in the grid along `axis` (0, 1, 2)."""

    axis: int
    dtype: DataType = INT32


@dataclass(frozen=True)
class Binary(Expr):
    op: str
    lhs: Expr
    rhs: Expr

    @property
    def dtype(self) -> DataType:  # type: ignore[override]
        if self.op in COMPARISON_OPS or self.op in LOGICAL_OPS:
            return BOOL
        if self.op in ("<<", ">>"):
            return self.lhs.dtype
        return promote(self.lhs.dtype, self.rhs.dtype)


@dataclass(frozen=True)
class Unary(Expr):
    op: str
    operand: Expr

    @property
    def dtype(self) -> DataType:  # type: ignore[override]
        return BOOL if self.op == "not" else self.operand.dtype


@dataclass(frozen=True)
class Select(Expr):
    """`if_true if cond else if_false`."""

    cond: Expr
    if_true: Expr
    if_false: Expr

    @property
    def dtype(self) -> DataType:  # type: ignore[override]
        return promote(self.if_true.dtype, self.if_false.dtype)


@dataclass(frozen=True)
class ScalarCast(Expr):
    operand: Expr
    dtype: DataType



def promote(a: DataType, b: DataType) -> DataType:
    """The type of a binary arithmetic result: a float beats an integer, wider beats
    narrower, and integers are at least int32."""
    if a.is_float or b.is_float:
        floats = [t for t in (a, b) if t.is_float]
        return max(floats, key=lambda t: t.bits)
    widest = max((a, b), key=lambda t: t.bits)
    return widest if widest.bits > 32 else INT32


def const(value: int | float | bool, dtype: DataType | str | None = None) -> Const:
    """A literal; its type defaults to int32, f32 or bool from the Python value."""
    if dtype is None:
        if isinstance(value, bool):
            dtype = BOOL
        elif isinstance(value, int):
            dtype = INT32
        else:
            dtype = FLOAT32
    return Const(value, parse(dtype))


def as_expr(value: Expr | int | float | bool) -> Expr:
    """An expression from an expression or a Python literal."""
    return value if isinstance(value, Expr) else const(value)


def free_vars(expr: Expr) -> set[Var]:
    """Every `Var` an expression reads."""
    if isinstance(expr, Var):
        return {expr}
    if isinstance(expr, Binary):
        return free_vars(expr.lhs) | free_vars(expr.rhs)
    if isinstance(expr, Unary):
        return free_vars(expr.operand)
    if isinstance(expr, ScalarCast):
        return free_vars(expr.operand)
    if isinstance(expr, Select):
        return free_vars(expr.cond) | free_vars(expr.if_true) | free_vars(expr.if_false)
    return set()


# ---- text form -------------------------------------------------------------------------

def format_expr(expr: Expr) -> str:
    """An expression in the text form (fully parenthesized, so it reads back exactly)."""
    if isinstance(expr, Const):
        return _format_const(expr)
    if isinstance(expr, Var):
        return expr.name
    if isinstance(expr, BlockIndex):
        return f"block_idx.{'xyz'[expr.axis]}"
    if isinstance(expr, Binary):
        if expr.op in ("cdiv", "min", "max"):
            return f"{expr.op}({format_expr(expr.lhs)}, {format_expr(expr.rhs)})"
        return f"({format_expr(expr.lhs)} {expr.op} {format_expr(expr.rhs)})"
    if isinstance(expr, Unary):
        space = " " if expr.op == "not" else ""
        return f"({expr.op}{space}{format_expr(expr.operand)})"
    if isinstance(expr, Select):
        return (f"select({format_expr(expr.cond)}, {format_expr(expr.if_true)}, "
                f"{format_expr(expr.if_false)})")
    if isinstance(expr, ScalarCast):
        return f"{expr.dtype}({format_expr(expr.operand)})"
    raise TypeError(f"not an expression: {expr!r}")


def format_number(value: int | float | bool) -> str:
    """A number literal of the text form (`nan`, `inf`, `-inf` for the non-finite)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return repr(value)


def _format_const(c: Const) -> str:
    if c.dtype == BOOL and isinstance(c.value, bool):
        return "true" if c.value else "false"
    if (c.dtype == INT32 and type(c.value) is int) or (c.dtype == FLOAT32
                                                        and type(c.value) is float):
        return format_number(c.value)
    return f"const({format_number(c.value)}, {c.dtype})"
