"""The names of a kernel being compiled: the symbol table (`Undefined` marks a name bound
only inside a runtime construct), the records of names carried through a runtime loop
or `if` (`Slot`, `Frame`), and the scan of the names a block of statements assigns.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tilevm.ir.errors import VMError
from tilevm.ir.expr import Var
from tilevm.ir.types import Tensor


class Undefined:
    """The value of a name that has no value here (bound only inside a runtime construct)."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


class SymbolTable(dict):
    """The kernel's local names. `exec` reads names through `__getitem__` (a dict
    subclass as locals), which turns a read of an undefined name into its message."""

    def __getitem__(self, name: str) -> Any:
        value = dict.__getitem__(self, name)
        if isinstance(value, Undefined):
            raise VMError(value.message)
        return value

    def defined(self) -> dict[str, Any]:
        return {k: v for k, v in self.items() if not isinstance(v, Undefined)}


@dataclass
class Slot:
    """A name carried through a runtime construct."""

    kind: str  # "scalar", "tile" or "python"
    proxy: Any  # what the name is bound to between statements
    var: Var | None = None
    tensor: Tensor | None = None


@dataclass
class Frame:
    kind: str  # "for loop" or "if"
    line: int
    slots: dict[str, Slot]
    before: set[str]


def same_python_value(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def assigned_names(stmts: Iterable[ast.stmt]) -> set[str]:
    """Names a block (re)binds, nested blocks included (not nested scopes)."""
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_Name(self, node: ast.Name) -> None:
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                found.add(node.id)

        def visit_alias(self, node: ast.alias) -> None:
            found.add((node.asname or node.name).split(".")[0])

        def visit_Lambda(self, node: ast.Lambda) -> None:
            pass

        def _scope(self, node: ast.AST) -> None:
            for n in ast.walk(node):  # only := leaks out of a comprehension
                if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name):
                    found.add(n.target.id)

        visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _scope

    visitor = Visitor()
    for stmt in stmts:
        visitor.visit(stmt)
    return found
