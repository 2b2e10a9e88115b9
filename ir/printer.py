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

A LAYOUT is the layout's own text (`tilevm.layouts.expression` reads it).
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from tilevm.ir.errors import SourceLoc
from tilevm.ir.expr import (
    BOOL,
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
)
from tilevm.ir.instructions import Instruction
from tilevm.ir.stmt import AssignVar, For, If, Let, Program, Seq, Stmt
from tilevm.ir.types import Pointer, Tensor, TensorType

INDENT = "  "


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


def _format_number(value: int | float | bool) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return repr(value)


def _format_const(c: Const) -> str:
    if c.dtype == BOOL and isinstance(c.value, bool):
        return "true" if c.value else "false"
    if (c.dtype == INT32 and type(c.value) is int) or (c.dtype == FLOAT32
                                                        and type(c.value) is float):
        return _format_number(c.value)
    return f"const({_format_number(c.value)}, {c.dtype})"


def format_type(t: TensorType) -> str:
    dims = ", ".join(str(d) if isinstance(d, int) else format_expr(d) for d in t.shape)
    text = f"{t.space.value}<{t.dtype}>[{dims}]"
    return text if t.layout is None else f"{text} {{{t.layout}}}"


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
        return _format_number(value)
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
