"""Read the printer's text form (see `tilevm.ir.printer` for the grammar) back to a `Program`.

    program = parse_program(text)        # parse_program(format_program(p)) == p
    expr = parse_expr("(n + 1)", {"n": Var("n", INT32)})

The parser is generic over the instruction set, like the printer: an instruction line's
`OPNAME` is looked up in `ir.instructions.INSTRUCTIONS`, and each `FIELD=VALUE` is read
according to the dataclass field's type annotation (`Tensor`: a defined `%name`;
`Pointer`: a pointer parameter; `Expr`: a scalar expression; `tuple[...]`: a parenthesized
tuple; a union: by the value's form; `int`/`float`/`bool`/`str`: a literal; anything else,
e.g. a layout in an `Any` field: `{LAYOUT}`, read by `tilevm.layouts.expression.parse_layout`).

Expressions are parsed with Python's `ast` and *interpreted* (never evaluated): variables
must be defined (parameters, `let`s and loop variables in scope), and only the forms the
printer writes are accepted. Names may carry `.N` suffixes (`i.1`, the builder's fresh
names). A numeric literal under a unary minus is a negative constant (`-3`); wrapped in
its own parentheses it is a negation (`(-3)`), as the printer writes them.

Reading rules where the text alone is ambiguous (they match what `Builder` builds):
the dimensions of a `global` tensor type are always expressions; those of `shared` and
`register` tensors are ints when they are integer literals.

Every error is a `ParseError` naming the 1-based line and quoting it.
"""

from __future__ import annotations

import ast
import math
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, fields
from typing import Any

from tilevm import dtypes
from tilevm.dtypes import DataType
from tilevm.ir.errors import SourceLoc, VMError
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
from tilevm.ir.instructions import INSTRUCTIONS, Instruction, Lowering
from tilevm.ir.stmt import AssignVar, For, If, Let, Program, Seq, Stmt
from tilevm.ir.types import MemorySpace, Pointer, PointerType, Tensor, TensorType
from tilevm.layouts.expression import parse_layout

__all__ = ["ParseError", "parse_program", "parse_expr", "parse_type"]


class ParseError(VMError):
    """The text is not a well-formed program. `line` is 1-based (0: not tied to a line),
    `text` the offending line."""

    def __init__(self, message: str, line: int = 0, text: str | None = None) -> None:
        self.line = line
        self.text = text
        where = f"line {line}: " if line else ""
        super().__init__(where + message, instruction=text.strip() if text else None)


class _Error(Exception):
    """Internal: a problem within one line (the caller adds the line number)."""


# ---- lexical helpers ----------------------------------------------------------------------

_NAME = r"[A-Za-z_]\w*(?:\.\d+)*"
_NAME_RE = re.compile(_NAME)
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {v: k for k, v in _OPEN.items()}


def _scan(text: str, strict: bool = True) -> Iterable[tuple[int, str, int]]:
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
                raise _Error(f"unterminated string starting at column {i + 1}")
            i = end + 1
            continue
        if ch in _CLOSE:
            if not stack or stack[-1] != _CLOSE[ch]:
                if strict:
                    raise _Error(f"unbalanced {ch!r} at column {i + 1}")
            else:
                stack.pop()
        yield i, ch, len(stack)
        if ch in _OPEN:
            stack.append(ch)
        i += 1
    if stack and strict:
        raise _Error(f"unclosed {stack[-1]!r}")


def _find_top(text: str, chars: str) -> int:
    """Index of the first of `chars` outside brackets and strings, or -1."""
    for i, ch, depth in _scan(text):
        if depth == 0 and ch in chars:
            return i
    return -1


def _split_top(text: str, sep: str = ",") -> list[str]:
    """`text` split at top-level `sep`s; a trailing empty piece (a trailing comma) dropped."""
    pieces, start = [], 0
    for i, ch, depth in list(_scan(text)):
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
        raise _Error(f"empty item in {text.strip()!r}")
    return pieces


def _group(text: str, start: int) -> tuple[str, int]:
    """The inside of the bracket group opening at `text[start]`, and the index after it."""
    if start >= len(text) or text[start] not in _OPEN:
        raise _Error(f"expected '(' at {text[start:]!r}" if start < len(text)
                     else "unexpected end of line")
    for i, ch, depth in _scan(text[start:], strict=False):
        if depth == 0 and ch == _OPEN[text[start]]:
            return text[start + 1:start + i], start + i + 1
    raise _Error(f"unclosed {text[start]!r} at column {start + 1}")


def _parse_dtype(text: str) -> DataType:
    try:
        return dtypes.parse(text.strip())
    except (dtypes.DTypeError, ValueError, TypeError) as err:
        raise _Error(f"unknown data type {text.strip()!r} ({err})") from None


def _string_literal(text: str) -> str:
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        node = None
    if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
        raise _Error(f"expected a quoted string, got {text.strip()!r}")
    return node.value


def _number_literal(text: str) -> int | float:
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise _Error(f"expected a number, got {text.strip()!r}") from None
    value = _literal_value(node)
    if value is None or isinstance(value, bool):
        raise _Error(f"expected a number, got {text.strip()!r}")
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
    pattern = re.compile(r"(?<![\w.])" + _NAME + r"(?![\w.])")
    strings = [(i, ch) for i, ch, _ in _scan(text)]
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
            raise _Error("expected an expression, got nothing")
        try:
            tree = ast.parse(self.text, mode="eval")
        except SyntaxError as err:
            raise _Error(f"malformed expression {self.original!r}: {err.msg}") from None
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        return self.visit(tree.body)

    def piece(self, node: ast.AST) -> str:
        text = ast.get_source_segment(self.text, node) or type(node).__name__
        for key, name in self.names.items():
            text = text.replace(key, name)
        return text

    def fail(self, node: ast.AST, why: str) -> _Error:
        return _Error(f"{why}: {self.piece(node)!r}")

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
            raise _Error(f"undefined name {name!r} in {self.original!r}")
        value = self.scope[name]
        if isinstance(value, Pointer):
            raise _Error(f"{name!r} is a pointer, not a scalar, in {self.original!r}")
        if not isinstance(value, Expr):
            raise _Error(f"{name!r} is not a scalar in {self.original!r}")
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


def _read_expr(text: str, scope: Mapping[str, Any]) -> Expr:
    return _ExprReader(text, scope).read()


def parse_expr(text: str, scope: Mapping[str, Var] | Iterable[Var] | None = None) -> Expr:
    """The expression `text` denotes; its variables are looked up in `scope` (a mapping
    from names to `Var`s, or an iterable of `Var`s)."""
    if scope is None:
        scope = {}
    elif not isinstance(scope, Mapping):
        scope = {v.name: v for v in scope}
    try:
        return _read_expr(text, scope)
    except _Error as err:
        raise ParseError(str(err), 0, text) from None
    except RecursionError:
        raise ParseError("expression nested too deeply", 0, text) from None


# ---- types ------------------------------------------------------------------------------------

_TYPE_RE = re.compile(r"^(\w+)\s*<\s*([^>]+?)\s*>\s*(\[.*)$", re.S)


def _read_type(text: str, scope: Mapping[str, Any]) -> TensorType:
    text = text.strip()
    m = _TYPE_RE.match(text)
    if not m:
        raise _Error(f"malformed tensor type {text!r} (expected SPACE<DTYPE>[DIMS] {{LAYOUT}})")
    try:
        space = MemorySpace(m.group(1))
    except ValueError:
        raise _Error(f"unknown memory space {m.group(1)!r} (global, shared or register)") \
            from None
    dtype = _parse_dtype(m.group(2))
    rest = m.group(3)
    inside, end = _group(rest, 0)
    dims: list[int | Expr] = []
    for piece in _split_top(inside):
        if space is not MemorySpace.GLOBAL and re.fullmatch(r"\d+", piece):
            dims.append(int(piece))
        else:
            dims.append(_read_expr(piece, scope))
    tail = rest[end:].strip()
    layout = None
    if tail:
        if not tail.startswith("{"):
            raise _Error(f"unexpected {tail!r} after the tensor type's shape")
        layout_text, end = _group(tail, 0)
        if tail[end:].strip():
            raise _Error(f"unexpected {tail[end:].strip()!r} after the layout")
        layout = _read_layout(layout_text)
    return TensorType(space, dtype, tuple(dims), layout)


def parse_type(text: str, scope: Mapping[str, Var] | None = None) -> TensorType:
    """A tensor type `SPACE<DTYPE>[DIM, ...] {LAYOUT}`."""
    try:
        return _read_type(text, scope or {})
    except _Error as err:
        raise ParseError(str(err), 0, text) from None


def _read_layout(text: str) -> Any:
    try:
        return parse_layout(text)
    except Exception as err:  # LayoutError, or anything a layout constructor raises
        raise _Error(f"bad layout {{{text.strip()}}}: {err}") from None


# ---- instruction fields ------------------------------------------------------------------------

class _Context:
    """What names mean while reading: tensors (program-wide), pointers, scalar scopes."""

    def __init__(self) -> None:
        self.tensors: dict[str, Tensor] = {}
        self.pointers: dict[str, Pointer] = {}
        self.scopes: list[dict[str, Var]] = [{}]

    def scalars(self) -> dict[str, Any]:
        merged: dict[str, Any] = dict(self.pointers)
        for scope in self.scopes:
            merged.update(scope)
        return merged

    def define_var(self, var: Var) -> None:
        if var.name in self.scalars():
            raise _Error(f"{var.name!r} is already defined")
        self.scopes[-1][var.name] = var

    def define_tensor(self, tensor: Tensor) -> None:
        if tensor.name in self.tensors:
            raise _Error(f"duplicate tensor name %{tensor.name}")
        self.tensors[tensor.name] = tensor

    def tensor(self, text: str) -> Tensor:
        text = text.strip()
        if not text.startswith("%"):
            raise _Error(f"expected a tensor (%name), got {text!r}")
        name = text[1:]
        if not name or re.search(r"[\s,()\[\]{}]", name):
            raise _Error(f"malformed tensor name {text!r}")
        if name not in self.tensors:
            raise _Error(f"undefined tensor %{name}")
        return self.tensors[name]

    def pointer(self, text: str) -> Pointer:
        name = text.strip()
        if name not in self.pointers:
            raise _Error(f"undefined pointer {name!r}")
        return self.pointers[name]


_NONE = type(None)


def _convert(text: str, tp: Any, ctx: _Context) -> Any:
    """The value of a field of type `tp` written as `text`."""
    text = text.strip()
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if text.startswith("%"):
            if Tensor not in options:
                raise _Error(f"a tensor is not allowed here: {text!r}")
            return ctx.tensor(text)
        if text == "None" and _NONE in options:
            return None
        error: _Error | None = None
        for option in options:
            if option in (Tensor, _NONE):
                continue
            try:
                return _convert(text, option, ctx)
            except _Error as err:
                error = error or err
        raise error or _Error(f"cannot read {text!r}")
    if origin is tuple:
        args = typing.get_args(tp)
        if not text.startswith("(") or _group(text, 0)[1] != len(text):
            raise _Error(f"expected a parenthesized tuple, got {text!r}")
        items = _split_top(_group(text, 0)[0])
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(item, args[0], ctx) for item in items)
        if len(items) != len(args):
            raise _Error(f"expected a tuple of {len(args)} items, got {text!r}")
        return tuple(_convert(item, t, ctx) for item, t in zip(items, args, strict=True))
    if tp is Tensor:
        return ctx.tensor(text)
    if tp is Pointer:
        return ctx.pointer(text)
    if tp is Expr or (isinstance(tp, type) and issubclass(tp, Expr)):
        return _read_expr(text, ctx.scalars())
    if tp is bool:
        if text in ("True", "true"):
            return True
        if text in ("False", "false"):
            return False
        raise _Error(f"expected True or False, got {text!r}")
    if tp is int:
        value = _number_literal(text)
        if not isinstance(value, int):
            raise _Error(f"expected an integer, got {text!r}")
        return value
    if tp is float:
        value = _number_literal(text)
        if not isinstance(value, float):
            raise _Error(f"expected a float, got {text!r}")
        return value
    if tp is str:
        return _string_literal(text)
    if tp is DataType:
        return _parse_dtype(text)
    if tp is _NONE:
        if text != "None":
            raise _Error(f"expected None, got {text!r}")
        return None
    if tp is Lowering:
        return _read_lowering(text)
    if text.startswith("{"):  # a layout (an `Any` field, or a layout class)
        inside, end = _group(text, 0)
        if end != len(text):
            raise _Error(f"unexpected {text[end:]!r} after the layout")
        return _read_layout(inside)
    raise _Error(f"cannot read {text!r} as {getattr(tp, '__name__', tp)}")


def _read_lowering(text: str) -> Lowering:
    """`NAME` or `NAME(KEY=LITERAL, ...)` (a `Lowering`; literals are ints, bools, strings)."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        node = None
    if isinstance(node, ast.Name):
        return Lowering(node.id)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args:
        params = []
        for kw in node.keywords:
            if kw.arg is None or not isinstance(kw.value, ast.Constant) or \
                    not isinstance(kw.value.value, (int, str)):
                break
            params.append((kw.arg, kw.value.value))
        else:
            return Lowering(node.func.id, tuple(params))
    raise _Error(f"expected a lowering NAME or NAME(KEY=VALUE, ...), got {text!r}")


_HINTS: dict[type, dict[str, Any]] = {}


def _field_types(cls: type[Instruction]) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _defines_scalar(text: str) -> bool:
    """Whether `text` (a `let`'s right-hand side) is an instruction with a scalar result."""
    m = re.match(r"\s*([A-Za-z_]\w*)(?:\s|$)", text)
    cls = INSTRUCTIONS.get(m.group(1)) if m else None
    return cls is not None and _field_types(cls).get("out") is Var


def _read_instruction(text: str, loc: SourceLoc | None, ctx: _Context,
                      scalar: Var | None = None) -> Instruction:
    """One instruction; `scalar` is the variable a `let` line gives its scalar result."""
    out_name = None
    m = re.match(r"%(\S+?)\s*=\s*(?!=)", text)
    if m:
        out_name, text = m.group(1), text[m.end():]
    m = re.match(r"([A-Za-z_]\w*)\s*", text)
    if not m:
        raise _Error(f"expected an instruction name, got {text.strip()!r}")
    opname, rest = m.group(1), text[m.end():]
    cls = INSTRUCTIONS.get(opname)
    if cls is None:
        raise _Error(f"unknown instruction {opname!r} (known: {', '.join(sorted(INSTRUCTIONS))})")
    colon = _find_top(rest, ":")
    type_text = None
    if colon >= 0:
        rest, type_text = rest[:colon], rest[colon + 1:]
    hints = _field_types(cls)
    names = {f.name for f in fields(cls)}
    kwargs: dict[str, Any] = {"loc": loc}
    if hints.get("out") is Var:
        if scalar is None or out_name is not None or type_text is not None:
            raise _Error(f"{opname} defines a scalar: write let NAME: DTYPE = {opname} ...")
        names.discard("out")
        kwargs["out"] = scalar
    elif scalar is not None:
        raise _Error(f"{opname} defines no scalar variable (no let NAME: DTYPE =)")
    if "out" in names:
        if out_name is None or type_text is None:
            raise _Error(f"{opname} produces a tensor: write %NAME = {opname} ... : TYPE")
        out = Tensor(out_name, _read_type(type_text, ctx.scalars()))
    elif out_name is not None or type_text is not None:
        raise _Error(f"{opname} produces no tensor (no %NAME = and no : TYPE)")
    for item in _split_top(rest):
        m = re.match(r"([A-Za-z_]\w*)\s*=(?!=)", item)
        if not m:
            raise _Error(f"expected FIELD=VALUE, got {item!r}")
        name, value = m.group(1), item[m.end():]
        if name not in names or name in ("out", "loc"):
            known = ", ".join(f.name for f in fields(cls)
                              if f.name not in ("out", "loc", "lowering"))
            raise _Error(f"{opname} has no field {name!r} (fields: {known or 'none'})")
        if name in kwargs:
            raise _Error(f"field {name!r} given twice")
        kwargs[name] = _convert(value, hints[name], ctx)
    for f in fields(cls):
        if f.name not in kwargs and f.name != "out" and f.default is MISSING \
                and f.default_factory is MISSING:
            raise _Error(f"{opname} needs field {f.name!r}")
    if "out" in names:
        kwargs["out"] = out
    inst = cls(**kwargs)
    if "out" in names:
        ctx.define_tensor(out)
    return inst


# ---- statements and programs ----------------------------------------------------------------

_LOC_RE = re.compile(r'^"(.*)":(\d+)$')


def _split_loc(text: str) -> tuple[str, SourceLoc | None]:
    at = next((i for i, ch, _ in _scan(text, strict=False) if ch == "@"), -1)
    if at < 0:
        return text.rstrip(), None
    m = _LOC_RE.match(text[at + 1:].strip())
    if not m:
        raise _Error(f'malformed source location {text[at:].strip()!r} (expected @ "FILE":LINE)')
    return text[:at].rstrip(), SourceLoc(m.group(1), int(m.group(2)))


_FOR_RE = re.compile(r"^for\s+(" + _NAME + r")\s+in\s+range\s*(\(.*)$")
_LET_RE = re.compile(r"^let\s+(" + _NAME + r")\s*:\s*([^=]+?)\s*=(?!=)(.*)$")
_ASSIGN_RE = re.compile(r"^(" + _NAME + r")\s*=(?!=)(.*)$")


class _Frame:
    """An open `{` block: what it builds and the statements gathered so far."""

    def __init__(self, kind: str, line: int, stmt: Any = None) -> None:
        self.kind, self.line, self.stmt = kind, line, stmt
        self.body: list[Stmt] = []
        self.then_body: list[Stmt] | None = None


def _read_header(text: str, ctx: _Context) -> dict[str, Any]:
    m = re.match(r"^kernel\s+([^\s(]+)\s*", text)
    if not m:
        raise _Error("expected the program header: kernel NAME(PARAMS) grid(...) warps(N) {")
    header: dict[str, Any] = {"name": m.group(1), "constants": (), "producer_warps": 0,
                              "producer_registers": 0, "cluster": 1,
                              "producer_converts": 0}
    pos = m.end()
    inside, pos = _group(text, pos)
    params: list[Pointer | Var] = []
    for item in _split_top(inside):
        pm = re.match(r"^(" + _NAME + r")\s*:\s*(.+)$", item)
        if not pm:
            raise _Error(f"malformed parameter {item!r} (NAME: [const] ptr<DTYPE> or NAME: DTYPE)")
        name, kind = pm.group(1), pm.group(2).strip()
        if name in ctx.scalars():
            raise _Error(f"duplicate parameter {name!r}")
        ptr = re.match(r"^(const\s+)?ptr\s*<\s*(.+?)\s*>$", kind)
        if ptr:
            param = Pointer(name, PointerType(_parse_dtype(ptr.group(2)), bool(ptr.group(1))))
            ctx.pointers[name] = param
            params.append(param)
        else:
            var = Var(name, _parse_dtype(kind))
            ctx.define_var(var)
            params.append(var)
    header["params"] = tuple(params)
    seen: set[str] = set()
    while True:
        rest = text[pos:].lstrip()
        pos = len(text) - len(rest)
        if rest == "{":
            break
        km = re.match(r"^(grid|warps|constants|producer_warps|producer_registers|"
                      r"producer_converts|cluster)\s*", rest)
        if not km:
            raise _Error(f"unexpected {rest!r} in the header (expected grid(...), warps(N), "
                         "constants(...), producer_warps(N), producer_registers(N), "
                         "producer_converts(1), cluster(N) or '{')")
        key = km.group(1)
        if key in seen:
            raise _Error(f"{key}(...) given twice")
        seen.add(key)
        inside, pos = _group(text, pos + km.end())
        if key == "grid":
            header["grid"] = tuple(_read_expr(g, ctx.scalars()) for g in _split_top(inside))
            if not 1 <= len(header["grid"]) <= 3:
                raise _Error("grid(...) takes 1 to 3 expressions")
        elif key == "warps":
            header["num_warps"] = _convert(inside, int, ctx)
        elif key in ("producer_warps", "producer_registers", "producer_converts", "cluster"):
            header[key] = _convert(inside, int, ctx)
        else:
            consts = []
            for item in _split_top(inside):
                eq = item.find("=")
                if eq <= 0:
                    raise _Error(f"malformed constant {item!r} (NAME='VALUE')")
                consts.append((item[:eq].strip(), _string_literal(item[eq + 1:])))
            header["constants"] = tuple(consts)
    for key in ("grid", "warps"):
        if key not in seen:
            raise _Error(f"the header needs {key}(...)")
    return header


def parse_program(text: str) -> Program:
    """The program `text` denotes (the printer's format)."""
    lines = text.split("\n")
    ctx = _Context()
    header: dict[str, Any] | None = None
    stack: list[_Frame] = []
    program: Program | None = None
    number, line = 0, ""
    try:
        for number, line in enumerate(lines, 1):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            if program is not None:
                raise _Error("text after the end of the program")
            if header is None:
                header = _read_header(stripped, ctx)
                header["param_scope"] = dict(ctx.scopes[0])
                stack.append(_Frame("kernel", number))
                continue
            program = _read_line(stripped, number, stack, ctx, header)
        if header is None:
            number, line = 1, lines[0]
            raise _Error("no program (expected: kernel NAME(PARAMS) grid(...) warps(N) {)")
        if program is None:
            frame = stack[-1]
            number, line = frame.line, lines[frame.line - 1]
            raise _Error("'{' is never closed")
    except _Error as err:
        raise ParseError(str(err), number, line) from None
    except ParseError:
        raise
    except RecursionError:
        raise ParseError("nested too deeply", number, line) from None
    except Exception as err:  # a constructor's own check (bad layout arguments, ...)
        raise ParseError(f"{type(err).__name__}: {err}", number, line) from None
    return program


def _program(header: dict[str, Any], body: list[Stmt], producer: list[Stmt] | None
             ) -> Program:
    return Program(header["name"], header["params"], header["grid"], header["num_warps"],
                   Seq(body=tuple(body)), header["constants"], header["producer_warps"],
                   None if producer is None else Seq(body=tuple(producer)),
                   header["producer_registers"], header["cluster"],
                   bool(header["producer_converts"]))


def _read_line(text: str, number: int, stack: list[_Frame], ctx: _Context,
               header: dict[str, Any]) -> Program | None:
    """Read one body line; returns the program when the kernel's `}` closes it."""
    frame = stack[-1]
    if text == "}":
        stack.pop()
        ctx.scopes.pop()
        if frame.kind == "kernel":
            return _program(header, frame.body, None)
        if frame.kind == "producer":
            return _program(header, frame.then_body, frame.body)
        stack[-1].body.append(_close(frame))
        return None
    if text.replace(" ", "") == "}producer{":
        if frame.kind != "kernel":
            raise _Error("'} producer {' must close the kernel's body")
        stack[-1] = _Frame("producer", frame.line)
        stack[-1].then_body = frame.body  # the body the producer's statements follow
        # The producer's statements define their own tensors and scalars anew.
        ctx.tensors = {}
        ctx.scopes = [dict(header["param_scope"])]
        return None
    if text.replace(" ", "") == "}else{":
        if frame.kind != "if" or frame.then_body is not None:
            raise _Error("'} else {' without an open if")
        frame.then_body, frame.body = frame.body, []
        ctx.scopes[-1] = {}
        return None
    body, loc = _split_loc(text)
    if not body.endswith("{"):
        for _ in _scan(body):  # brackets must balance within the line
            pass
    if body.endswith("{"):
        head = body[:-1].rstrip()
        m = _FOR_RE.match(head)
        if m:
            inside, end = _group(m.group(2), 0)
            bounds = _split_top(inside)
            if len(bounds) != 3:
                raise _Error("range(...) takes start, stop and step")
            scope = ctx.scalars()
            start, stop, step = (_read_expr(b, scope) for b in bounds)
            tail = m.group(2)[end:].strip()
            unroll = None
            if tail:
                um = re.fullmatch(r"unroll\s+(\S+)", tail)
                if not um:
                    raise _Error(f"unexpected {tail!r} after range(...) (expected unroll N)")
                unroll = _convert(um.group(1), int, ctx)
            var = Var(m.group(1), INT32)
            frame = _Frame("for", number, dict(var=var, start=start, stop=stop, step=step,
                                               unroll=unroll, loc=loc))
            ctx.scopes.append({})
            ctx.define_var(var)
            stack.append(frame)
            return None
        m = re.match(r"^if\s+(.+)$", head)
        if m:
            cond = _read_expr(m.group(1), ctx.scalars())
            stack.append(_Frame("if", number, dict(cond=cond, loc=loc)))
            ctx.scopes.append({})
            return None
        raise _Error("malformed block statement (expected for ... {, if ... {)")
    m = _LET_RE.match(body)
    if m:
        var = Var(m.group(1), _parse_dtype(m.group(2)))
        if _defines_scalar(m.group(3)):  # `let NAME: DTYPE = OPNAME FIELD=VALUE, ...`
            frame.body.append(_read_instruction(m.group(3).strip(), loc, ctx, var))
        else:
            frame.body.append(Let(var=var, value=_read_expr(m.group(3), ctx.scalars()),
                                  loc=loc))
        ctx.define_var(var)
        return None
    m = _ASSIGN_RE.match(body)
    if m:
        name = m.group(1)
        var = ctx.scalars().get(name)
        if not isinstance(var, Var):
            raise _Error(f"assignment to undefined variable {name!r}")
        frame.body.append(AssignVar(var=var, value=_read_expr(m.group(2), ctx.scalars()),
                                    loc=loc))
        return None
    frame.body.append(_read_instruction(body, loc, ctx))
    return None


def _close(frame: _Frame) -> Stmt:
    if frame.kind == "for":
        return For(body=Seq(body=tuple(frame.body)), **frame.stmt)
    if frame.then_body is None:
        return If(then_body=Seq(body=tuple(frame.body)), else_body=None, **frame.stmt)
    return If(then_body=Seq(body=tuple(frame.then_body)), else_body=Seq(body=tuple(frame.body)),
              **frame.stmt)
