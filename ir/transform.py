"""Rewriting programs: `map_instructions` replaces each instruction (a pass that annotates
instructions uses it; `map_seq` does so in a statement tree, and may drop some);
`map_tensors` replaces every occurrence of tensors (a pass that
changes tensor types, e.g. layout inference, uses it) throughout a program; and walking
them: `nested_statements`, `instructions`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import fields, replace
from typing import Any

from tilevm.ir.instructions import Instruction
from tilevm.ir.stmt import For, If, Program, Seq, Stmt
from tilevm.ir.types import Tensor


def map_tensors(program: Program, fn: Callable[[Tensor], Tensor]) -> Program:
    """The program with every tensor `t` (definitions and uses) replaced by `fn(t)`."""

    def value(v: Any) -> Any:
        if isinstance(v, Tensor):
            return fn(v)
        if isinstance(v, tuple):
            return tuple(value(x) for x in v)
        return v

    return map_instructions(program, lambda s: replace(
        s, **{f.name: value(getattr(s, f.name)) for f in fields(s)
              if f.name not in ("loc", "lowering")}))


def map_instructions(program: Program, fn: Callable[[Instruction], Instruction],
                     loop_scope: Callable[[For], AbstractContextManager] | None = None
                     ) -> Program:
    """The program with every instruction `i` replaced by `fn(i)` (same statement tree),
    in program order; `loop_scope(loop)`, if given, is entered around each loop's body
    (a pass that tracks what holds inside loops uses it)."""
    return replace(program, body=map_seq(program.body, fn, loop_scope))


def map_seq(seq: Seq, fn: Callable[[Instruction], Instruction | None],
            loop_scope: Callable[[For], AbstractContextManager] | None = None) -> Seq:
    """`seq` with every instruction `i` replaced by `fn(i)`, or left out where that is
    None (same statement tree otherwise), in program order; `loop_scope` as for
    `map_instructions`."""

    def stmt(s: Any) -> Any:
        if isinstance(s, Instruction):
            return fn(s)
        if isinstance(s, Seq):
            return Seq(body=tuple(x for x in map(stmt, s.body) if x is not None))
        if isinstance(s, For):
            with loop_scope(s) if loop_scope is not None else nullcontext():
                return replace(s, body=stmt(s.body))
        if isinstance(s, If):
            return replace(s, then_body=stmt(s.then_body),
                           else_body=None if s.else_body is None else stmt(s.else_body))
        return s

    return stmt(seq)


def nested_statements(seq: Seq) -> Iterator[Stmt]:
    """Every statement inside `seq`, nested ones included, in program order (a loop or
    branch before its body)."""
    for s in seq.body:
        yield s
        if isinstance(s, Seq):
            yield from nested_statements(s)
        elif isinstance(s, For):
            yield from nested_statements(s.body)
        elif isinstance(s, If):
            yield from nested_statements(s.then_body)
            if s.else_body is not None:
                yield from nested_statements(s.else_body)


def instructions(seq: Seq) -> list[Instruction]:
    """Every instruction of a statement tree, in program order."""
    return [s for s in nested_statements(seq) if isinstance(s, Instruction)]
