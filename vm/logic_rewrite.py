"""The rewrite of a kernel's AST before it is walked: `a and b` -> `__tv_and(a, lambda: b)`,
`not a` -> `__tv_not(a)`, `x if c else y` -> `__tv_select(c, lambda: x, lambda: y)`. The
helpers (`LOGIC_HELPERS`, in the globals the kernel's statements run with) keep Python's
meaning (short-circuit, one branch) on Python values and build IR on runtime values.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from tilevm.ir.errors import VMError
from tilevm.ir.expr import Binary, Select, Unary
from tilevm.vm import frontend_values as fv
from tilevm.vm.frontend_values import Scalar, Tile
from tilevm.vm.lang_tiles import where


class RewriteLogic(ast.NodeTransformer):
    """`a and b` -> `__tv_and(a, lambda: b)`, `not a` -> `__tv_not(a)`,
    `x if c else y` -> `__tv_select(c, lambda: x, lambda: y)`; annotated assignments lose
    their annotation. The helpers keep Python's meaning for Python values."""

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        name = "__tv_and" if isinstance(node.op, ast.And) else "__tv_or"
        args = [node.values[0]] + [_thunk(v) for v in node.values[1:]]
        return ast.copy_location(_call(name, args), node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(_call("__tv_not", [node.operand]), node)
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        call = _call("__tv_select", [node.test, _thunk(node.body), _thunk(node.orelse)])
        return ast.copy_location(call, node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        self.generic_visit(node)
        if node.value is None:
            return ast.copy_location(ast.Pass(), node)
        return ast.copy_location(ast.Assign(targets=[node.target], value=node.value), node)


def _call(name: str, args: list[ast.expr]) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=args, keywords=[])


def _thunk(expr: ast.expr) -> ast.Lambda:
    empty = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                          kwarg=None, defaults=[])
    return ast.copy_location(ast.Lambda(args=empty, body=expr), expr)


def is_runtime(value: Any) -> bool:
    return isinstance(value, (Scalar, Tile))


def _no_tile(value: Any, op: str, instead: str) -> None:
    if isinstance(value, Tile):
        raise VMError(f"`{op}` on a tile is not elementwise; use {instead}")


def _tv_logic(op: str, first: Any, rest: tuple[Callable[[], Any], ...]) -> Any:
    """Python's `and`/`or` (short-circuit, returning an operand) on Python values; on a
    runtime Scalar, the IR's bool `and`/`or` of both sides."""
    value = first
    for thunk in rest:
        _no_tile(value, op, "&" if op == "and" else "|")
        if isinstance(value, Scalar):
            other = thunk()
            _no_tile(other, op, "&" if op == "and" else "|")
            value = Scalar(Binary(op, fv.to_bool_expr(value), fv.to_bool_expr(other)))
        elif bool(value) != (op == "and"):  # `and` stops at a falsy value, `or` at a truthy
            return value
        else:
            value = thunk()
    return value


def _tv_and(first: Any, *rest: Callable[[], Any]) -> Any:
    return _tv_logic("and", first, rest)


def _tv_or(first: Any, *rest: Callable[[], Any]) -> Any:
    return _tv_logic("or", first, rest)


def _tv_not(value: Any) -> Any:
    _no_tile(value, "not", "~")
    if isinstance(value, Scalar):
        return Scalar(Unary("not", fv.to_bool_expr(value)))
    return not value


def _tv_select(cond: Any, if_true: Callable[[], Any], if_false: Callable[[], Any]) -> Any:
    if isinstance(cond, Tile):
        raise VMError("`x if cond else y` with a tile condition: use tv.where(cond, x, y)")
    if not isinstance(cond, Scalar):
        return if_true() if cond else if_false()
    a, b = if_true(), if_false()
    if isinstance(a, Tile) or isinstance(b, Tile):
        return where(cond, a, b)
    return Scalar(Select(fv.to_bool_expr(cond), fv.to_expr(a), fv.to_expr(b)))


LOGIC_HELPERS = {"__tv_and": _tv_and, "__tv_or": _tv_or, "__tv_not": _tv_not,
            "__tv_select": _tv_select}
