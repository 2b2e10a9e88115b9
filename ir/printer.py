"""The stable text form of VM programs (`vmc compile --emit ir`, golden tests, `.vm` files).

One instruction per line, every tensor an SSA-style `%name`, every defined tensor with
its full type. The format is generic over the instruction set: an instruction prints
as its `opname` and its dataclass fields in declaration order, so a new instruction
needs no printer (or parser) code. `ir.parser` reads this text back to an equal
program.

Grammar (one statement per line, `@ "file":line` optionally ends a line):

    kernel NAME(PARAM, ...) grid(EXPR, ...) warps(N) [constants(NAME=STRING, ...)] {
      %OUT = OPNAME FIELD=VALUE, ... : TYPE          instruction with a result
      OPNAME FIELD=VALUE, ...                        instruction without one
      let NAME: DTYPE = OPNAME FIELD=VALUE, ...      instruction with a scalar result
      let NAME: DTYPE = EXPR                         scalar variable
      NAME = EXPR                                    update of a scalar variable
      for NAME in range(EXPR, EXPR, EXPR) [unroll N] {
      }
      if EXPR {
      } else {
      }
    }

    PARAM  := NAME: [const] ptr<DTYPE> | NAME: DTYPE
    TYPE   := SPACE<DTYPE>[DIM, ...] [{LAYOUT}]      SPACE is global, shared or register
    VALUE  := %TENSOR | POINTER | EXPR | (VALUE, ...) | {LAYOUT} | Python literal
    lowering=NAME[(KEY=LITERAL, ...)]                the backend's choice (`Lowering`)
    EXPR   := Python expression syntax over variables, literals, block_idx.x/y/z, true,
              false, cdiv/min/max/select(...), DTYPE(EXPR) (a conversion) and
              const(VALUE, DTYPE) (a literal of a type other than int32/f32/bool)

A LAYOUT is the layout's own text (`tilevm.layouts.expression` reads it). Expressions
print by `ir.expr.format_expr` and tensor types by `ir.types.format_type` (their own
`__str__`); this module prints instructions, statements and programs.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from tilevm.ir.errors import SourceLoc
from tilevm.ir.expr import Expr, Var, format_expr, format_number
from tilevm.ir.instructions import Instruction
from tilevm.ir.stmt import AssignVar, For, If, Let, Program, Seq, Stmt
from tilevm.ir.types import Pointer, Tensor, format_type

INDENT = "  "


def format_value(value: Any) -> str:
    """An instruction field's value."""
    if isinstance(value, Tensor):
        return f"%{value.name}"
    if isinstance(value, Pointer):
        return value.name
    if isinstance(value, Expr):
        return format_expr(value)
    if isinstance(value, tuple):
        inner = ", ".join(format_value(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, (bool, int, float)):
        return format_number(value)
    if isinstance(value, str):
        return repr(value)
    if value is None:
        return "None"
    return f"{{{value}}}"  # a layout


def format_loc(loc: SourceLoc | None) -> str:
    return "" if loc is None else f'  @ "{loc.file}":{loc.line}'


def format_instruction(inst: Instruction) -> str:
    """One instruction on one line, without indentation or location."""
    args = ", ".join(f"{f.name}={format_value(getattr(inst, f.name))}"
                     for f in fields(inst) if f.name not in ("out", "loc", "lowering")
                     and not (f.metadata.get("omitted_at_default")
                              and getattr(inst, f.name) == f.default))
    if inst.lowering is not None:  # chosen by a backend pass; last, so the eye finds it
        args = f"{args}, lowering={inst.lowering}" if args else f"lowering={inst.lowering}"
    text = f"{inst.opname} {args}".rstrip()
    out = inst.output
    if out is not None:
        text = f"%{out.name} = {text} : {format_type(out.type)}"
    elif inst.defines is not None:  # a scalar result reads like a `let`
        text = f"let {inst.defines.name}: {inst.defines.dtype} = {text}"
    return text


def _format_param(param: Pointer | Var) -> str:
    if isinstance(param, Pointer):
        return f"{param.name}: {param.type}"
    return f"{param.name}: {param.dtype}"


def format_program(program: Program) -> str:
    """The whole program as text (ends with a newline)."""
    params = ", ".join(_format_param(p) for p in program.params)
    grid = ", ".join(format_expr(g) for g in program.grid)
    header = f"kernel {program.name}({params}) grid({grid}) warps({program.num_warps})"
    if program.constants:
        header += " constants(" + ", ".join(f"{k}={v!r}" for k, v in program.constants) + ")"
    if program.producer_warps:
        header += f" producer_warps({program.producer_warps})"
    if program.producer_registers:
        header += f" producer_registers({program.producer_registers})"
    if program.producer_converts:
        header += " producer_converts(1)"
    if program.cluster != 1:
        header += f" cluster({program.cluster})"
    lines = [header + " {"]
    _format_seq(program.body, 1, lines)
    if program.producer is not None:
        lines.append("} producer {")
        _format_seq(program.producer, 1, lines)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _format_seq(seq: Seq, depth: int, lines: list[str]) -> None:
    for stmt in seq.body:
        _format_stmt(stmt, depth, lines)


def _format_stmt(stmt: Stmt, depth: int, lines: list[str]) -> None:
    pad = INDENT * depth
    if isinstance(stmt, Instruction):
        lines.append(pad + format_instruction(stmt) + format_loc(stmt.loc))
    elif isinstance(stmt, Let):
        lines.append(f"{pad}let {stmt.var.name}: {stmt.var.dtype} = {format_expr(stmt.value)}"
                     + format_loc(stmt.loc))
    elif isinstance(stmt, AssignVar):
        lines.append(f"{pad}{stmt.var.name} = {format_expr(stmt.value)}" + format_loc(stmt.loc))
    elif isinstance(stmt, For):
        unroll = "" if stmt.unroll is None else f" unroll {stmt.unroll}"
        lines.append(f"{pad}for {stmt.var.name} in range({format_expr(stmt.start)}, "
                     f"{format_expr(stmt.stop)}, {format_expr(stmt.step)}){unroll} {{"
                     + format_loc(stmt.loc))
        _format_seq(stmt.body, depth + 1, lines)
        lines.append(pad + "}")
    elif isinstance(stmt, If):
        lines.append(f"{pad}if {format_expr(stmt.cond)} {{" + format_loc(stmt.loc))
        _format_seq(stmt.then_body, depth + 1, lines)
        if stmt.else_body is not None:
            lines.append(pad + "} else {")
            _format_seq(stmt.else_body, depth + 1, lines)
        lines.append(pad + "}")
    elif isinstance(stmt, Seq):
        _format_seq(stmt, depth, lines)
    else:
        raise TypeError(f"not a statement: {stmt!r}")
