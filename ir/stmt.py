"""Statements and programs: structured control flow around instructions.

A program body is a `Seq` of statements: instructions, `For` loops over a scalar
range (with an unroll hint), `If` branches on a scalar condition, and scalar
variables (`Let` declares one with a value, `AssignVar` updates it; loop-carried
scalars are such variables).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilevm.ir.errors import SourceLoc
from tilevm.ir.expr import Expr, Var
from tilevm.ir.instructions import Instruction
from tilevm.ir.types import Pointer


@dataclass(frozen=True, kw_only=True)
class Seq:
    body: tuple[Stmt, ...] = ()


@dataclass(frozen=True, kw_only=True)
class For:
    """`for var in range(start, stop, step): body`; `unroll` is a hint (None: the
    compiler decides, 1: never)."""

    var: Var
    start: Expr
    stop: Expr
    step: Expr
    body: Seq
    unroll: int | None = None
    loc: SourceLoc | None = None


@dataclass(frozen=True, kw_only=True)
class If:
    cond: Expr
    then_body: Seq
    else_body: Seq | None = None
    loc: SourceLoc | None = None


@dataclass(frozen=True, kw_only=True)
class Let:
    """Declare the scalar variable `var` with an initial value."""

    var: Var
    value: Expr
    loc: SourceLoc | None = None


@dataclass(frozen=True, kw_only=True)
class AssignVar:
    """Update a scalar variable declared by `Let`."""

    var: Var
    value: Expr
    loc: SourceLoc | None = None


Stmt = Instruction | Seq | For | If | Let | AssignVar


@dataclass(frozen=True)
class Program:
    """A kernel: a program for one thread block, run over `grid` blocks.

    `params` are the kernel arguments in order (pointers and scalars); `grid` has 1 to 3
    scalar expressions over the scalar parameters; `constants` records the compile-time
    values the program was specialized with (for display and caching only).

    `producer_warps` (0 or 1, `tv.producer_warp()`): the block gets that many warps more,
    which issue the program's TMA copies; the body still describes what every one of the
    `num_warps` warps does, and the program means what it means without them (the
    interpreter ignores the field). `producer` is the producer warp's own body, which
    the pass `split_producer_warp` derives from `body` (None before it, or without a
    producer warp).
    """

    name: str
    params: tuple[Pointer | Var, ...]
    grid: tuple[Expr, ...]
    num_warps: int
    body: Seq
    constants: tuple[tuple[str, str], ...] = field(default=())
    producer_warps: int = 0
    producer: Seq | None = None

    @property
    def num_threads(self) -> int:
        """The threads that run `body` (over which register tiles are laid out)."""
        return 32 * self.num_warps

    @property
    def block_threads(self) -> int:
        """The threads a launch starts: `num_threads` and the producer warps'."""
        return 32 * (self.num_warps + self.producer_warps)
