"""Layouts written as text: `parse_layout("local(2,1).spatial(8,4).local(1,2)")`.

This is the syntax of `vmc layout`, and the form layouts take in the IR's text: the
`str()` of every layout is an expression this module reads back to an equal layout.

The text is parsed with Python's `ast` and *interpreted*, never `eval`ed: only the
constructors in `CONSTRUCTORS`, the methods in `METHODS`, `*` between layouts, integer,
string and boolean literals, tuples and lists, and data type names (`f16`, `int4`) are
accepted. Anything else is a `LayoutError` that quotes the offending piece.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from tilevm import dtypes
from tilevm.layouts import fragments, register_layout, shared_layout, swizzle
from tilevm.layouts.errors import LayoutError

CONSTRUCTORS: dict[str, Callable[..., Any]] = {
    "local": register_layout.local,
    "spatial": register_layout.spatial,
    "column_local": register_layout.column_local,
    "column_spatial": register_layout.column_spatial,
    "replicated": register_layout.replicated,
    "RegisterLayout": register_layout.RegisterLayout,
    "mma_m16n8k16_a": fragments.mma_m16n8k16_a,
    "mma_m16n8k16_b": fragments.mma_m16n8k16_b,
    "mma_m16n8k16_c": fragments.mma_m16n8k16_c,
    "ldmatrix": fragments.ldmatrix,
    "row_major": shared_layout.row_major,
    "column_major": shared_layout.column_major,
    "swizzled": shared_layout.swizzled,
    "SharedLayout": shared_layout.SharedLayout,
    "Swizzle": swizzle.Swizzle,
}

METHODS = frozenset({
    "local", "spatial", "column_local", "column_spatial", "replicated", "reduce", "permute",
    "reshape", "flatten", "squeeze", "unsqueeze", "recast",
})


def parse_layout(text: str) -> Any:
    """The layout a text denotes (a `RegisterLayout` or a `SharedLayout`)."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise LayoutError(f"cannot read layout {text!r}: {err.msg} at column {err.offset}") \
            from None
    return _Interpreter(text).visit(tree.body)


class _Interpreter:
    def __init__(self, text: str) -> None:
        self.text = text

    def fail(self, node: ast.AST, why: str) -> LayoutError:
        piece = ast.get_source_segment(self.text.strip(), node) or type(node).__name__
        return LayoutError(f"in layout {self.text!r}: {why}: {piece!r}")

    def visit(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, str, bool)):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            value = self.visit(node.operand)
            if isinstance(value, int):
                return -value
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.visit(e) for e in node.elts)
        if isinstance(node, ast.Name):
            if node.id in ("True", "False"):
                return node.id == "True"
            try:
                return dtypes.parse(node.id)
            except dtypes.DTypeError:
                raise self.fail(node, "unknown name") from None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            return self.call(node, lambda a, b: a * b, [self.visit(node.left),
                                                          self.visit(node.right)], {})
        if isinstance(node, ast.Call):
            args = [self.visit(a) for a in node.args]
            kwargs = {k.arg: self.visit(k.value) for k in node.keywords if k.arg}
            if len(kwargs) != len(node.keywords):
                raise self.fail(node, "**kwargs are not accepted")
            if isinstance(node.func, ast.Name):
                if node.func.id not in CONSTRUCTORS:
                    raise self.fail(node.func, f"unknown constructor (known: "
                                               f"{', '.join(sorted(CONSTRUCTORS))})")
                return self.call(node, CONSTRUCTORS[node.func.id], args, kwargs)
            if isinstance(node.func, ast.Attribute) and node.func.attr in METHODS:
                target = self.visit(node.func.value)
                method = getattr(target, node.func.attr, None)
                if method is None:
                    raise self.fail(node.func, f"{type(target).__name__} has no method "
                                               f"{node.func.attr!r}")
                return self.call(node, method, args, kwargs)
            raise self.fail(node.func, "not a layout constructor or method")
        raise self.fail(node, "not allowed in a layout expression")

    def call(self, node: ast.AST, func: Callable[..., Any], args: list, kwargs: dict) -> Any:
        try:
            return func(*args, **kwargs)
        except LayoutError as err:
            raise self.fail(node, str(err)) from None
        except (TypeError, ValueError) as err:
            raise self.fail(node, f"bad arguments ({err})") from None
