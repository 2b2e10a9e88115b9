"""Reading the pieces of the IR text form: `ParseError`, the lexical helpers (balanced
groups, top-level splits, literals), scalar expressions (`parse_expr`), tensor types
(`parse_type`) and layouts. `ir.parser` reads whole programs with them.

Expressions are parsed with Python's `ast` and *interpreted* (never evaluated): variables
must be defined (parameters, `let`s and loop variables in scope), and only the forms the
printer writes are accepted. Names may carry `.N` suffixes (`i.1`, the builder's fresh
names). A numeric literal under a unary minus is a negative constant (`-3`); wrapped in
its own parentheses it is a negation (`(-3)`), as the printer writes them.

Reading rules where the text alone is ambiguous (they match what `Builder` builds):
the dimensions of a `global` tensor type are always expressions; those of `shared` and
`register` tensors are ints when they are integer literals.

    expr = parse_expr("(n + 1)", {"n": Var("n", INT32)})
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from tilevm import dtypes
from tilevm.dtypes import DataType
from tilevm.ir.errors import VMError
from tilevm.ir.expr import (
    FLOAT32,
    INT32,
    Binary,
    BlockIndex,
    Const,
    Expr,
    ScalarCast,
    Select,
    Unary,
    Var,
    const,
)
from tilevm.ir.types import MemorySpace, Pointer, TensorType
from tilevm.layouts.expression import parse_layout

__all__ = ["ParseError", "parse_expr", "parse_type"]


class ParseError(VMError):
    """The text is not a well-formed program. `line` is 1-based (0: not tied to a line),
    `text` the offending line."""

    def __init__(self, message: str, line: int = 0, text: str | None = None) -> None:
        self.line = line
        self.text = text
        where = f"line {line}: " if line else ""
        super().__init__(where + message, instruction=text.strip() if text else None)


class LineError(Exception):
    """Internal: a problem within one line (the caller adds the line number)."""


# ---- lexical helpers ----------------------------------------------------------------------

NAME_PATTERN = r"[A-Za-z_]\w*(?:\.\d+)*"
_NAME_RE = re.compile(NAME_PATTERN)
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {v: k for k, v in _OPEN.items()}


def scan(text: str, strict: bool = True) -> Iterable[tuple[int, str, int]]:
    """(index, char, depth) of every character outside string literals, checking that
    brackets balance unless not `strict` (depth counts open brackets before the character)."""
    stack: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "'\"":
            end = i + 1
            while end < len(text) and text[end] != ch:
                end += 2 if text[end] == "\\" else 1
            if end >= len(text):
                raise LineError(f"unterminated string starting at column {i + 1}")
            i = end + 1
            continue
        if ch in _CLOSE:
            if not stack or stack[-1] != _CLOSE[ch]:
                if strict:
                    raise LineError(f"unbalanced {ch!r} at column {i + 1}")
            else:
                stack.pop()
        yield i, ch, len(stack)
        if ch in _OPEN:
            stack.append(ch)
        i += 1
    if stack and strict:
        raise LineError(f"unclosed {stack[-1]!r}")


def find_top(text: str, chars: str) -> int:
    """Index of the first of `chars` outside brackets and strings, or -1."""
    for i, ch, depth in scan(text):
        if depth == 0 and ch in chars:
            return i
    return -1


def split_top(text: str, sep: str = ",") -> list[str]:
    """`text` split at top-level `sep`s; a trailing empty piece (a trailing comma) dropped."""
    pieces, start = [], 0
    for i, ch, depth in list(scan(text)):
        if depth == 0 and ch == sep:
            pieces.append(text[start:i])
            start = i + 1
    pieces.append(text[start:])
    pieces = [p.strip() for p in pieces]
    if len(pieces) > 1 and not pieces[-1]:
        pieces.pop()
    if pieces == [""]:
        return []
    if any(not p for p in pieces):
        raise LineError(f"empty item in {text.strip()!r}")
    return pieces


def balanced_group(text: str, start: int) -> tuple[str, int]:
    """The inside of the bracket group opening at `text[start]`, and the index after it."""
    if start >= len(text) or text[start] not in _OPEN:
        raise LineError(f"expected '(' at {text[start:]!r}" if start < len(text)
                     else "unexpected end of line")
    for i, ch, depth in scan(text[start:], strict=False):
        if depth == 0 and ch == _OPEN[text[start]]:
            return text[start + 1:start + i], start + i + 1
    raise LineError(f"unclosed {text[start]!r} at column {start + 1}")


def parse_dtype(text: str) -> DataType:
    try:
        return dtypes.parse(text.strip())
    except (dtypes.DTypeError, ValueError, TypeError) as err:
        raise LineError(f"unknown data type {text.strip()!r} ({err})") from None


def string_literal(text: str) -> str:
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        node = None
    if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
        raise LineError(f"expected a quoted string, got {text.strip()!r}")
    return node.value


def number_literal(text: str) -> int | float:
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise LineError(f"expected a number, got {text.strip()!r}") from None
    value = _literal_value(node)
    if value is None or isinstance(value, bool):
        raise LineError(f"expected a number, got {text.strip()!r}")
    return value


def _literal_value(node: ast.AST) -> int | float | bool | None:
    """The value of a literal node (`3`, `-2.5`, `inf`, `-inf`, `nan`, `true`), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _literal_value(node.operand)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, (bool, int, float)):
        return node.value
    if isinstance(node, ast.Name):
        return {"inf": math.inf, "nan": math.nan, "true": True, "false": False}.get(node.id)
    return None


# ---- expressions ---------------------------------------------------------------------------

_BINOPS: dict[type, str] = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
}
_CMPOPS: dict[type, str] = {
    ast.Lt: "<", ast.LtE: "<=", ast.Eq: "==", ast.NotEq: "!=", ast.Gt: ">", ast.GtE: ">=",
}
_UNOPS: dict[type, str] = {ast.USub: "-", ast.Not: "not", ast.Invert: "~"}
_MANGLE = "_tvm_name_"


def _mangle(text: str) -> tuple[str, dict[str, str]]:
    """Replace names with `.N` suffixes (not Python identifiers) outside string literals."""
    table: dict[str, str] = {}
    out, last = [], 0
    pattern = re.compile(r"(?<![\w.])" + NAME_PATTERN + r"(?![\w.])")
    strings = [(i, ch) for i, ch, _ in scan(text)]
    plain = set(i for i, _ in strings)
    for m in pattern.finditer(text):
        if "." not in m.group(0) or m.start() not in plain:
            continue
        key = table.setdefault(m.group(0), f"{_MANGLE}{len(table)}")
        out.append(text[last:m.start()] + key)
        last = m.end()
    out.append(text[last:])
    return "".join(out), {v: k for k, v in table.items()}


class _ExprReader:
    def __init__(self, text: str, scope: Mapping[str, Any]) -> None:
        self.original = text.strip()
        self.text, self.names = _mangle(self.original)
        self.scope = scope
        self.parents: dict[ast.AST, ast.AST] = {}

    def read(self) -> Expr:
        if not self.text:
            raise LineError("expected an expression, got nothing")
        try:
            tree = ast.parse(self.text, mode="eval")
        except SyntaxError as err:
            raise LineError(f"malformed expression {self.original!r}: {err.msg}") from None
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        return self.visit(tree.body)

    def piece(self, node: ast.AST) -> str:
        text = ast.get_source_segment(self.text, node) or type(node).__name__
        for key, name in self.names.items():
            text = text.replace(key, name)
        return text

    def fail(self, node: ast.AST, why: str) -> LineError:
        return LineError(f"{why}: {self.piece(node)!r}")

    def name(self, node: ast.Name) -> str:
        return self.names.get(node.id, node.id)

    def own_parens(self, node: ast.AST) -> int:
        """How many pairs of parentheses wrap `node` itself (not a call's)."""
        line = self.text.encode()
        before, after = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
        pairs = 0
        while True:
            b = before - 1
            while b >= 0 and line[b:b + 1] == b" ":
                b -= 1
            a = after
            while a < len(line) and line[a:a + 1] == b" ":
                a += 1
            if b < 0 or a >= len(line) or line[b:b + 1] != b"(" or line[a:a + 1] != b")":
                break
            pairs, before, after = pairs + 1, b, a + 1
        parent = self.parents.get(node)
        if isinstance(parent, ast.Call) and len(parent.args) == 1 and not parent.keywords:
            pairs -= 1  # the call's own parentheses
        return pairs

    def visit(self, node: ast.AST) -> Expr:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
                and not (isinstance(node.operand, ast.Name) and node.operand.id in self.scope):
            value = _literal_value(node)
            if value is not None and not self.own_parens(node):
                return Const(value, FLOAT32 if isinstance(value, float) else INT32)
        if isinstance(node, ast.Constant) and isinstance(node.value, (bool, int, float)):
            return const(node.value)
        if isinstance(node, ast.Name):
            if self.name(node) in self.scope:
                return self.variable(node)
            value = _literal_value(node)
            if value is not None:
                return const(value)
            if node.id in ("True", "False"):
                return const(node.id == "True")
            return self.variable(node)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return Binary(_BINOPS[type(node.op)], self.visit(node.left), self.visit(node.right))
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1 or type(node.ops[0]) not in _CMPOPS:
                raise self.fail(node, "chained or unknown comparison (write (a < b) and ...)")
            return Binary(_CMPOPS[type(node.ops[0])], self.visit(node.left),
                          self.visit(node.comparators[0]))
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            result = self.visit(node.values[0])
            for value_node in node.values[1:]:
                result = Binary(op, result, self.visit(value_node))
            return result
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNOPS:
            return Unary(_UNOPS[type(node.op)], self.visit(node.operand))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "block_idx":
            if node.attr not in ("x", "y", "z"):
                raise self.fail(node, "block_idx has axes x, y and z")
            return BlockIndex("xyz".index(node.attr))
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.fail(node, "not allowed in an expression")

    def variable(self, node: ast.Name) -> Expr:
        name = self.name(node)
        if name not in self.scope:
            raise LineError(f"undefined name {name!r} in {self.original!r}")
        value = self.scope[name]
        if isinstance(value, Pointer):
            raise LineError(f"{name!r} is a pointer, not a scalar, in {self.original!r}")
        if not isinstance(value, Expr):
            raise LineError(f"{name!r} is not a scalar in {self.original!r}")
        return value

    def call(self, node: ast.Call) -> Expr:
        if not isinstance(node.func, ast.Name):
            raise self.fail(node.func, "unknown function")
        func = node.func.id
        if node.keywords:
            raise self.fail(node, "keyword arguments are not accepted")
        args = node.args
        arity = {"const": 2, "select": 3, "cdiv": 2, "min": 2, "max": 2}.get(func, 1)
        if len(args) != arity:
            raise self.fail(node, f"{func}() takes {arity} argument(s)")
        if func == "const":
            value = _literal_value(args[0])
            if value is None and isinstance(args[0], ast.Constant) \
                    and isinstance(args[0].value, bool):
                value = args[0].value
            if value is None:
                raise self.fail(args[0], "const() takes a literal value")
            return Const(value, self.dtype(args[1]))
        if func == "select":
            return Select(*(self.visit(a) for a in args))
        if func in ("cdiv", "min", "max"):
            return Binary(func, self.visit(args[0]), self.visit(args[1]))
        try:
            dtype = dtypes.parse(func)
        except (dtypes.DTypeError, ValueError, TypeError):
            raise self.fail(node.func, "unknown function (expected const, select, cdiv, min, "
                                       "max or a data type)") from None
        return ScalarCast(self.visit(args[0]), dtype)

    def dtype(self, node: ast.AST) -> DataType:
        if not isinstance(node, ast.Name):
            raise self.fail(node, "expected a data type")
        try:
            return dtypes.parse(self.name(node))
        except (dtypes.DTypeError, ValueError, TypeError):
            raise self.fail(node, "unknown data type") from None


def read_expr(text: str, scope: Mapping[str, Any]) -> Expr:
    return _ExprReader(text, scope).read()


def parse_expr(text: str, scope: Mapping[str, Var] | Iterable[Var] | None = None) -> Expr:
    """The expression `text` denotes; its variables are looked up in `scope` (a mapping
    from names to `Var`s, or an iterable of `Var`s)."""
    if scope is None:
        scope = {}
    elif not isinstance(scope, Mapping):
        scope = {v.name: v for v in scope}
    try:
        return read_expr(text, scope)
    except LineError as err:
        raise ParseError(str(err), 0, text) from None
    except RecursionError:
        raise ParseError("expression nested too deeply", 0, text) from None


# ---- types ------------------------------------------------------------------------------------

_TYPE_RE = re.compile(r"^(\w+)\s*<\s*([^>]+?)\s*>\s*(\[.*)$", re.S)


def read_type(text: str, scope: Mapping[str, Any]) -> TensorType:
    text = text.strip()
    m = _TYPE_RE.match(text)
    if not m:
        raise LineError(f"malformed tensor type {text!r} (expected SPACE<DTYPE>[DIMS] {{LAYOUT}})")
    try:
        space = MemorySpace(m.group(1))
    except ValueError:
        raise LineError(f"unknown memory space {m.group(1)!r} (global, shared or register)") \
            from None
    dtype = parse_dtype(m.group(2))
    rest = m.group(3)
    inside, end = balanced_group(rest, 0)
    dims: list[int | Expr] = []
    for piece in split_top(inside):
        if space is not MemorySpace.GLOBAL and re.fullmatch(r"\d+", piece):
            dims.append(int(piece))
        else:
            dims.append(read_expr(piece, scope))
    tail = rest[end:].strip()
    layout = None
    if tail:
        if not tail.startswith("{"):
            raise LineError(f"unexpected {tail!r} after the tensor type's shape")
        layout_text, end = balanced_group(tail, 0)
        if tail[end:].strip():
            raise LineError(f"unexpected {tail[end:].strip()!r} after the layout")
        layout = read_layout(layout_text)
    return TensorType(space, dtype, tuple(dims), layout)


def parse_type(text: str, scope: Mapping[str, Var] | None = None) -> TensorType:
    """A tensor type `SPACE<DTYPE>[DIM, ...] {LAYOUT}`."""
    try:
        return read_type(text, scope or {})
    except LineError as err:
        raise ParseError(str(err), 0, text) from None


def read_layout(text: str) -> Any:
    try:
        return parse_layout(text)
    except Exception as err:  # LayoutError, or anything a layout constructor raises
        raise LineError(f"bad layout {{{text.strip()}}}: {err}") from None
