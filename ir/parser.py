"""Read the printer's text form (see `tilevm.ir.printer` for the grammar) back to a `Program`.

    program = parse_program(text)        # parse_program(format_program(p)) == p

The parser is generic over the instruction set, like the printer: an instruction line's
`OPNAME` is looked up in `ir.instructions.INSTRUCTIONS`, and each `FIELD=VALUE` is read
according to the dataclass field's type annotation (`Tensor`: a defined `%name`;
`Pointer`: a pointer parameter; `Expr`: a scalar expression; `tuple[...]`: a parenthesized
tuple; a union: by the value's form; `int`/`float`/`bool`/`str`: a literal; anything else,
e.g. a layout in an `Any` field: `{LAYOUT}`, read by `tilevm.layouts.expression.parse_layout`).

Expressions, tensor types and layouts are read by `ir.expr_parser` (`parse_expr`,
`parse_type`); this module reads instruction fields, statements and programs.

Every error is a `ParseError` naming the 1-based line and quoting it.
"""

from __future__ import annotations

import ast
import re
import types
import typing
from dataclasses import MISSING, fields
from typing import Any

from tilevm.dtypes import DataType
from tilevm.ir.errors import SourceLoc
from tilevm.ir.expr import INT32, Expr, Var
from tilevm.ir.expr_parser import (
    NAME_PATTERN,
    LineError,
    ParseError,
    balanced_group,
    find_top,
    number_literal,
    parse_dtype,
    read_expr,
    read_layout,
    read_type,
    scan,
    split_top,
    string_literal,
)
from tilevm.ir.instructions import INSTRUCTIONS, Instruction, Lowering
from tilevm.ir.stmt import AssignVar, For, If, Let, Program, Seq, Stmt
from tilevm.ir.types import Pointer, PointerType, Tensor

__all__ = ["parse_program"]


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
            raise LineError(f"{var.name!r} is already defined")
        self.scopes[-1][var.name] = var

    def define_tensor(self, tensor: Tensor) -> None:
        if tensor.name in self.tensors:
            raise LineError(f"duplicate tensor name %{tensor.name}")
        self.tensors[tensor.name] = tensor

    def tensor(self, text: str) -> Tensor:
        text = text.strip()
        if not text.startswith("%"):
            raise LineError(f"expected a tensor (%name), got {text!r}")
        name = text[1:]
        if not name or re.search(r"[\s,()\[\]{}]", name):
            raise LineError(f"malformed tensor name {text!r}")
        if name not in self.tensors:
            raise LineError(f"undefined tensor %{name}")
        return self.tensors[name]

    def pointer(self, text: str) -> Pointer:
        name = text.strip()
        if name not in self.pointers:
            raise LineError(f"undefined pointer {name!r}")
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
                raise LineError(f"a tensor is not allowed here: {text!r}")
            return ctx.tensor(text)
        if text == "None" and _NONE in options:
            return None
        error: LineError | None = None
        for option in options:
            if option in (Tensor, _NONE):
                continue
            try:
                return _convert(text, option, ctx)
            except LineError as err:
                error = error or err
        raise error or LineError(f"cannot read {text!r}")
    if origin is tuple:
        args = typing.get_args(tp)
        if not text.startswith("(") or balanced_group(text, 0)[1] != len(text):
            raise LineError(f"expected a parenthesized tuple, got {text!r}")
        items = split_top(balanced_group(text, 0)[0])
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(item, args[0], ctx) for item in items)
        if len(items) != len(args):
            raise LineError(f"expected a tuple of {len(args)} items, got {text!r}")
        return tuple(_convert(item, t, ctx) for item, t in zip(items, args, strict=True))
    if tp is Tensor:
        return ctx.tensor(text)
    if tp is Pointer:
        return ctx.pointer(text)
    if tp is Expr or (isinstance(tp, type) and issubclass(tp, Expr)):
        return read_expr(text, ctx.scalars())
    if tp is bool:
        if text in ("True", "true"):
            return True
        if text in ("False", "false"):
            return False
        raise LineError(f"expected True or False, got {text!r}")
    if tp is int:
        value = number_literal(text)
        if not isinstance(value, int):
            raise LineError(f"expected an integer, got {text!r}")
        return value
    if tp is float:
        value = number_literal(text)
        if not isinstance(value, float):
            raise LineError(f"expected a float, got {text!r}")
        return value
    if tp is str:
        return string_literal(text)
    if tp is DataType:
        return parse_dtype(text)
    if tp is _NONE:
        if text != "None":
            raise LineError(f"expected None, got {text!r}")
        return None
    if tp is Lowering:
        return _read_lowering(text)
    if text.startswith("{"):  # a layout (an `Any` field, or a layout class)
        inside, end = balanced_group(text, 0)
        if end != len(text):
            raise LineError(f"unexpected {text[end:]!r} after the layout")
        return read_layout(inside)
    raise LineError(f"cannot read {text!r} as {getattr(tp, '__name__', tp)}")


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
    raise LineError(f"expected a lowering NAME or NAME(KEY=VALUE, ...), got {text!r}")


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
        raise LineError(f"expected an instruction name, got {text.strip()!r}")
    opname, rest = m.group(1), text[m.end():]
    cls = INSTRUCTIONS.get(opname)
    if cls is None:
        raise LineError(f"unknown instruction {opname!r} "
                        f"(known: {', '.join(sorted(INSTRUCTIONS))})")
    colon = find_top(rest, ":")
    type_text = None
    if colon >= 0:
        rest, type_text = rest[:colon], rest[colon + 1:]
    hints = _field_types(cls)
    names = {f.name for f in fields(cls)}
    kwargs: dict[str, Any] = {"loc": loc}
    if hints.get("out") is Var:
        if scalar is None or out_name is not None or type_text is not None:
            raise LineError(f"{opname} defines a scalar: write let NAME: DTYPE = {opname} ...")
        names.discard("out")
        kwargs["out"] = scalar
    elif scalar is not None:
        raise LineError(f"{opname} defines no scalar variable (no let NAME: DTYPE =)")
    if "out" in names:
        if out_name is None or type_text is None:
            raise LineError(f"{opname} produces a tensor: write %NAME = {opname} ... : TYPE")
        out = Tensor(out_name, read_type(type_text, ctx.scalars()))
    elif out_name is not None or type_text is not None:
        raise LineError(f"{opname} produces no tensor (no %NAME = and no : TYPE)")
    for item in split_top(rest):
        m = re.match(r"([A-Za-z_]\w*)\s*=(?!=)", item)
        if not m:
            raise LineError(f"expected FIELD=VALUE, got {item!r}")
        name, value = m.group(1), item[m.end():]
        if name not in names or name in ("out", "loc"):
            known = ", ".join(f.name for f in fields(cls)
                              if f.name not in ("out", "loc", "lowering"))
            raise LineError(f"{opname} has no field {name!r} (fields: {known or 'none'})")
        if name in kwargs:
            raise LineError(f"field {name!r} given twice")
        kwargs[name] = _convert(value, hints[name], ctx)
    for f in fields(cls):
        if f.name not in kwargs and f.name != "out" and f.default is MISSING \
                and f.default_factory is MISSING:
            raise LineError(f"{opname} needs field {f.name!r}")
    if "out" in names:
        kwargs["out"] = out
    inst = cls(**kwargs)
    if "out" in names:
        ctx.define_tensor(out)
    return inst


# ---- statements and programs ----------------------------------------------------------------

_LOC_RE = re.compile(r'^"(.*)":(\d+)$')


def _split_loc(text: str) -> tuple[str, SourceLoc | None]:
    at = next((i for i, ch, _ in scan(text, strict=False) if ch == "@"), -1)
    if at < 0:
        return text.rstrip(), None
    m = _LOC_RE.match(text[at + 1:].strip())
    if not m:
        raise LineError(f'malformed source location {text[at:].strip()!r} (expected @ "FILE":LINE)')
    return text[:at].rstrip(), SourceLoc(m.group(1), int(m.group(2)))


_FOR_RE = re.compile(r"^for\s+(" + NAME_PATTERN + r")\s+in\s+range\s*(\(.*)$")
_LET_RE = re.compile(r"^let\s+(" + NAME_PATTERN + r")\s*:\s*([^=]+?)\s*=(?!=)(.*)$")
_ASSIGN_RE = re.compile(r"^(" + NAME_PATTERN + r")\s*=(?!=)(.*)$")


class _Frame:
    """An open `{` block: what it builds and the statements gathered so far."""

    def __init__(self, kind: str, line: int, stmt: Any = None) -> None:
        self.kind, self.line, self.stmt = kind, line, stmt
        self.body: list[Stmt] = []
        self.then_body: list[Stmt] | None = None


def _read_header(text: str, ctx: _Context) -> dict[str, Any]:
    m = re.match(r"^kernel\s+([^\s(]+)\s*", text)
    if not m:
        raise LineError("expected the program header: kernel NAME(PARAMS) grid(...) warps(N) {")
    header: dict[str, Any] = {"name": m.group(1), "constants": (), "producer_warps": 0,
                              "producer_registers": 0, "cluster": 1,
                              "producer_converts": 0}
    pos = m.end()
    inside, pos = balanced_group(text, pos)
    params: list[Pointer | Var] = []
    for item in split_top(inside):
        pm = re.match(r"^(" + NAME_PATTERN + r")\s*:\s*(.+)$", item)
        if not pm:
            raise LineError(f"malformed parameter {item!r} "
                            "(NAME: [const] ptr<DTYPE> or NAME: DTYPE)")
        name, kind = pm.group(1), pm.group(2).strip()
        if name in ctx.scalars():
            raise LineError(f"duplicate parameter {name!r}")
        ptr = re.match(r"^(const\s+)?ptr\s*<\s*(.+?)\s*>$", kind)
        if ptr:
            param = Pointer(name, PointerType(parse_dtype(ptr.group(2)), bool(ptr.group(1))))
            ctx.pointers[name] = param
            params.append(param)
        else:
            var = Var(name, parse_dtype(kind))
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
            raise LineError(f"unexpected {rest!r} in the header (expected grid(...), warps(N), "
                         "constants(...), producer_warps(N), producer_registers(N), "
                         "producer_converts(1), cluster(N) or '{')")
        key = km.group(1)
        if key in seen:
            raise LineError(f"{key}(...) given twice")
        seen.add(key)
        inside, pos = balanced_group(text, pos + km.end())
        if key == "grid":
            header["grid"] = tuple(read_expr(g, ctx.scalars()) for g in split_top(inside))
            if not 1 <= len(header["grid"]) <= 3:
                raise LineError("grid(...) takes 1 to 3 expressions")
        elif key == "warps":
            header["num_warps"] = _convert(inside, int, ctx)
        elif key in ("producer_warps", "producer_registers", "producer_converts", "cluster"):
            header[key] = _convert(inside, int, ctx)
        else:
            consts = []
            for item in split_top(inside):
                eq = item.find("=")
                if eq <= 0:
                    raise LineError(f"malformed constant {item!r} (NAME='VALUE')")
                consts.append((item[:eq].strip(), string_literal(item[eq + 1:])))
            header["constants"] = tuple(consts)
    for key in ("grid", "warps"):
        if key not in seen:
            raise LineError(f"the header needs {key}(...)")
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
                raise LineError("text after the end of the program")
            if header is None:
                header = _read_header(stripped, ctx)
                header["param_scope"] = dict(ctx.scopes[0])
                stack.append(_Frame("kernel", number))
                continue
            program = _read_line(stripped, number, stack, ctx, header)
        if header is None:
            number, line = 1, lines[0]
            raise LineError("no program (expected: kernel NAME(PARAMS) grid(...) warps(N) {)")
        if program is None:
            frame = stack[-1]
            number, line = frame.line, lines[frame.line - 1]
            raise LineError("'{' is never closed")
    except LineError as err:
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
            raise LineError("'} producer {' must close the kernel's body")
        stack[-1] = _Frame("producer", frame.line)
        stack[-1].then_body = frame.body  # the body the producer's statements follow
        # The producer's statements define their own tensors and scalars anew.
        ctx.tensors = {}
        ctx.scopes = [dict(header["param_scope"])]
        return None
    if text.replace(" ", "") == "}else{":
        if frame.kind != "if" or frame.then_body is not None:
            raise LineError("'} else {' without an open if")
        frame.then_body, frame.body = frame.body, []
        ctx.scopes[-1] = {}
        return None
    body, loc = _split_loc(text)
    if not body.endswith("{"):
        for _ in scan(body):  # brackets must balance within the line
            pass
    if body.endswith("{"):
        head = body[:-1].rstrip()
        m = _FOR_RE.match(head)
        if m:
            inside, end = balanced_group(m.group(2), 0)
            bounds = split_top(inside)
            if len(bounds) != 3:
                raise LineError("range(...) takes start, stop and step")
            scope = ctx.scalars()
            start, stop, step = (read_expr(b, scope) for b in bounds)
            tail = m.group(2)[end:].strip()
            unroll = None
            if tail:
                um = re.fullmatch(r"unroll\s+(\S+)", tail)
                if not um:
                    raise LineError(f"unexpected {tail!r} after range(...) (expected unroll N)")
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
            cond = read_expr(m.group(1), ctx.scalars())
            stack.append(_Frame("if", number, dict(cond=cond, loc=loc)))
            ctx.scopes.append({})
            return None
        raise LineError("malformed block statement (expected for ... {, if ... {)")
    m = _LET_RE.match(body)
    if m:
        var = Var(m.group(1), parse_dtype(m.group(2)))
        if _defines_scalar(m.group(3)):  # `let NAME: DTYPE = OPNAME FIELD=VALUE, ...`
            frame.body.append(_read_instruction(m.group(3).strip(), loc, ctx, var))
        else:
            frame.body.append(Let(var=var, value=read_expr(m.group(3), ctx.scalars()),
                                  loc=loc))
        ctx.define_var(var)
        return None
    m = _ASSIGN_RE.match(body)
    if m:
        name = m.group(1)
        var = ctx.scalars().get(name)
        if not isinstance(var, Var):
            raise LineError(f"assignment to undefined variable {name!r}")
        frame.body.append(AssignVar(var=var, value=read_expr(m.group(2), ctx.scalars()),
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
