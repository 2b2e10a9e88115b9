"""One block's walk over a program's statements, for the cost model: the scalar
arguments bound and checked, the grid evaluated, and a walk that counts what one block
moves and computes (`Walker` into `Counts`); `cost.traffic` sums the walks over the grid
and `cost.footprint` records, on the same walk, which bytes each block touches.

The counting rules are cost/traffic.py's module docstring.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass
from math import prod

from tilevm.cost.flops import FLOP_COUNTS, instruction_flops
from tilevm.cost.scalars import CompiledExprs
from tilevm.cost.statements import expr_axes, variable_axes
from tilevm.ir.errors import VMError
from tilevm.ir.evaluate import evaluate
from tilevm.ir.expr import Expr, Var
from tilevm.ir.instructions import (
    AtomicAdd,
    CopyAsync,
    Dot,
    GlobalView,
    Instruction,
    LoadGlobal,
    LoadShared,
    StoreGlobal,
    StoreShared,
)
from tilevm.ir.stmt import AssignVar, For, If, Let, Program, Seq, Stmt
from tilevm.ir.transform import nested_statements
from tilevm.ir.types import MemorySpace, Tensor

__all__ = ["LEVELS", "EXACT_EXTENT", "SEGMENTS", "Context", "Counts", "View", "Walker",
           "Unknown", "UNKNOWN", "bind_scalars", "sample", "bits_to_bytes"]

LEVELS = ("global->register", "global->shared", "shared->register", "register->shared",
          "register->global")
EXACT_EXTENT = 16  # loops (and sampled grid axes) up to this many iterations: every one
SEGMENTS = 6  # runs a longer range is sampled in (besides its two first and two last)


def bits_to_bytes(bits: int) -> int:
    return -(-bits // 8)


# ---- the launch's scalars and grid -------------------------------------------------------

def bind_scalars(program: Program, scalars: Mapping[str, int | float]
                  ) -> dict[Var, int | float]:
    """The scalar parameters' values, checked: every one given, no other name, integers
    for integer parameters."""
    params = [p for p in program.params if isinstance(p, Var)]
    names = [p.name for p in params]
    unknown = sorted(set(scalars) - set(names))
    if unknown:
        raise ValueError(f"kernel {program.name} has no scalar parameter "
                         f"{', '.join(map(repr, unknown))} (its scalar parameters: "
                         f"{', '.join(names) or 'none'})")
    env: dict[Var, int | float] = {}
    for p in params:
        if p.name not in scalars:
            raise ValueError(f"kernel {program.name}: the scalar argument {p.name!r} "
                             f"({p.dtype}) is missing")
        value = scalars[p.name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) and \
                not hasattr(value, "__index__"):
            raise TypeError(f"kernel {program.name}: the scalar argument {p.name!r} must be "
                            f"a number, got {type(value).__name__} {value!r}")
        if not p.dtype.is_float:
            if isinstance(value, float):
                raise TypeError(f"kernel {program.name}: the scalar argument {p.name!r} "
                                f"({p.dtype}) must be an integer, got {value!r}")
            value = operator.index(value)
        env[p] = value
    return env


def launch_grid(program: Program, scalars: Mapping[Var, int | float]
                ) -> tuple[int, int, int]:
    """The launch grid, evaluated over the bound scalar arguments (`bind_scalars`)."""
    if not 1 <= len(program.grid) <= 3:
        raise ValueError(f"kernel {program.name} has no grid (1 to 3 expressions)")
    dims = []
    for axis, e in enumerate(program.grid):
        try:
            n = evaluate(e, lambda v: scalars[v])
        except (VMError, KeyError) as err:
            raise ValueError(f"kernel {program.name}: grid dimension {axis} ({e}) "
                             f"cannot be evaluated: {err}") from None
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"kernel {program.name}: grid dimension {axis} ({e}) is "
                             f"{n!r}, not a count of blocks")
        dims.append(n)
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


class Unknown(Exception):
    """A value only the run knows (the old value of an `atomic_add`)."""


UNKNOWN = object()  # the value of such a variable


class Context:
    """What every block's walk shares: the scalar arguments, and facts about the
    program's statements computed once (keyed by the statement's identity)."""

    def __init__(self, program: Program, scalars: dict[Var, int | float]) -> None:
        self.program = program
        self.scalars = scalars
        self.exprs = CompiledExprs()
        statements = list(nested_statements(program.body))
        var_axes = variable_axes(statements)
        # per atomic_add, the grid axes its offsets read: the blocks that differ only
        # along the others add to the same element (`Walker._atomic`)
        self.atomic_axes = {id(s): set().union(*(expr_axes(e, var_axes)
                                                  for e in s.offsets))
                            for s in statements if isinstance(s, AtomicAdd)}
        self.assigning_loops = {id(s) for s in statements if isinstance(s, For) and any(
            isinstance(t, AssignVar) for t in nested_statements(s.body))}
        self.grid = self._grid()

    def _grid(self) -> tuple[int, int, int]:
        return launch_grid(self.program, self.scalars)


# ---- one block's walk --------------------------------------------------------------------

class Counts:
    """What a walk adds up, in bits and operations (mutable, merged with weights)."""

    def __init__(self) -> None:
        self.moved = dict.fromkeys(LEVELS, 0)
        self.issued = dict.fromkeys(LEVELS, 0)
        self.flops = dict.fromkeys(FLOP_COUNTS, 0)
        self.tensor_moved: dict[tuple[str, str], int] = {}  # (pointer, read|write) -> bits
        self.tensor_issued: dict[tuple[str, str], int] = {}
        self.approximate = False

    def add(self, other: Counts, weight: int) -> None:
        for mine, theirs in ((self.moved, other.moved), (self.issued, other.issued),
                             (self.flops, other.flops),
                             (self.tensor_moved, other.tensor_moved),
                             (self.tensor_issued, other.tensor_issued)):
            for key, value in theirs.items():
                mine[key] = mine.get(key, 0) + value * weight
        self.approximate |= other.approximate

    def signature(self) -> tuple[int, ...]:
        """The counts, to tell whether two samples of a run agree."""
        return (*self.moved.values(), *self.issued.values(), *self.flops.values())


@dataclass(frozen=True)
class View:
    """A global view as one block sees it: `pointer`'s elements of `bits` from `offset`
    (elements), `shape` with `strides`; equal views, equal memory."""

    pointer: str
    bits: int  # of an element
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


class Walker:
    """One block's walk over the statements, with the scalars' values in `env`."""

    def __init__(self, context: Context, block: tuple[int, ...]) -> None:
        self.context = context
        self.block = (*block, 0, 0)[:3]
        self.env: dict[Var, object] = dict(context.scalars)
        self.views: dict[str, View] = {}

    def value(self, e: Expr) -> int | float:
        try:
            return self.context.exprs.compiled(e)(self._lookup, self.block)
        except VMError as err:
            raise ValueError(f"kernel {self.context.program.name}: {e} cannot be evaluated "
                             f"in block {self.block}: {err.message}") from None

    def _lookup(self, var: Var) -> int | float:
        try:
            value = self.env[var]
        except KeyError:
            raise VMError(f"{var.name} has no value") from None
        if value is UNKNOWN:
            raise Unknown(var.name)
        return value  # type: ignore[return-value]

    def walk(self, stmt: Stmt, counts: Counts) -> None:
        if isinstance(stmt, Seq):
            for s in stmt.body:
                self.walk(s, counts)
        elif isinstance(stmt, (Let, AssignVar)):
            try:
                self.env[stmt.var] = self.value(stmt.value)
            except Unknown:
                self.env[stmt.var] = UNKNOWN
        elif isinstance(stmt, If):
            self._branch(stmt, counts)
        elif isinstance(stmt, For):
            self._loop(stmt, counts)
        else:
            self._instruction(stmt, counts)

    def _branch(self, stmt: If, counts: Counts) -> None:
        try:
            taken = stmt.then_body if self.value(stmt.cond) else stmt.else_body
        except Unknown:  # both may run: the larger, marked approximate
            sides = []
            for body in (stmt.then_body, stmt.else_body or Seq()):
                side = Counts()
                self.walk(body, side)
                sides.append(side)
            larger = max(sides, key=lambda c: (sum(c.moved.values()), sum(c.flops.values())))
            counts.add(larger, 1)
            counts.approximate = True
            return
        if taken is not None:
            self.walk(taken, counts)

    def bounds(self, stmt: For) -> tuple[int, int, int]:
        """A loop's first value, step and number of iterations, checked."""
        try:
            start, stop, step = (self.value(e) for e in (stmt.start, stmt.stop, stmt.step))
        except Unknown as unknown:
            raise ValueError(f"kernel {self.context.program.name}: the bounds of the loop "
                             f"over {stmt.var.name} read {unknown}, known only at run "
                             "time") from None
        if not all(isinstance(v, int) for v in (start, stop, step)) or step == 0:
            raise ValueError(f"kernel {self.context.program.name}: the loop over "
                             f"{stmt.var.name} has bounds {start}, {stop}, step {step}")
        return start, step, len(range(start, stop, step))  # type: ignore[arg-type,return-value]

    def _loop(self, stmt: For, counts: Counts) -> None:
        start, step, trips = self.bounds(stmt)
        if trips <= EXACT_EXTENT or id(stmt) in self.context.assigning_loops:
            for i in range(trips):
                self.env[stmt.var] = start + i * step
                self.walk(stmt.body, counts)
            return
        run: set[tuple[int, ...]] = set()
        for i, weight, interior in sample(trips):
            self.env[stmt.var] = start + i * step
            iteration = Counts()
            self.walk(stmt.body, iteration)
            counts.add(iteration, weight)
            if interior:
                run.add(iteration.signature())
        counts.approximate |= len(run) > 1

    def _instruction(self, inst: Instruction, counts: Counts) -> None:
        if isinstance(inst, GlobalView):
            self._define_view(inst)
        elif isinstance(inst, LoadGlobal):
            self._global(counts, "global->register", inst.src, inst.offsets, inst.out, "read")
        elif isinstance(inst, CopyAsync):
            share = self.context.program.cluster if inst.multicast else 1
            self._global(counts, "global->shared", inst.src, inst.offsets, inst.dst, "read",
                         share)
        elif isinstance(inst, StoreGlobal):
            self._global(counts, "register->global", inst.dst, inst.offsets, inst.src,
                         "write")
        elif isinstance(inst, AtomicAdd):
            self._atomic(inst, counts)
        elif isinstance(inst, LoadShared):
            self._local(counts, "shared->register", inst.out)
        elif isinstance(inst, StoreShared):
            self._local(counts, "register->shared", inst.src)
        if isinstance(inst, Dot):
            for operand in (inst.a, inst.b):
                if operand.space is MemorySpace.SHARED:
                    self._local(counts, "shared->register", operand)
        for key, count in instruction_flops(inst).items():
            counts.flops[key] += count

    def _atomic(self, inst: AtomicAdd, counts: Counts) -> None:
        """One element written; the old value by the arrival order of the module
        docstring (the block's rank along the axes its offsets do not read, times the
        value added)."""
        view = self._view(inst.dst)
        self._add(counts, "register->global", view, view.bits, view.bits, "write")
        try:
            corner = tuple(self.value(o) for o in inst.offsets)
        except Unknown:
            counts.approximate = True
        else:
            self._touch(view, corner, (1,) * len(corner), "write")  # type: ignore[arg-type]
        rank, scale = 0, 1
        for axis, n in enumerate(self.context.grid):
            if axis not in self.context.atomic_axes[id(inst)]:
                rank += self.block[axis] * scale
                scale *= n
        try:
            self.env[inst.out] = self.value(inst.value) * rank
        except Unknown:
            self.env[inst.out] = UNKNOWN

    def _define_view(self, inst: GlobalView) -> None:
        try:
            offset = self.value(inst.offset)
            shape = tuple(self.value(s) if isinstance(s, Expr) else s
                          for s in inst.out.type.shape)
            strides = tuple(self.value(s) for s in inst.strides)
        except Unknown as unknown:
            raise ValueError(f"kernel {self.context.program.name}: the global view "
                             f"%{inst.out.name} reads {unknown}, known only at run time"
                             ) from None
        if not all(isinstance(v, int) for v in (offset, *shape, *strides)):
            raise ValueError(f"kernel {self.context.program.name}: the global view "
                             f"%{inst.out.name} has a non-integer offset, size or stride")
        self.views[inst.out.name] = View(inst.ptr.name, inst.out.dtype.bits, offset,  # type: ignore[arg-type]
                                         shape, strides)  # type: ignore[arg-type]

    def _view(self, tensor: Tensor) -> View:
        if tensor.name not in self.views:
            raise ValueError(f"kernel {self.context.program.name}: %{tensor.name} is not "
                             "a global view defined before its use")
        return self.views[tensor.name]

    def _global(self, counts: Counts, level: str, tensor: Tensor, offsets: tuple[Expr, ...],
                tile: Tensor, direction: str, share: int = 1) -> None:
        view = self._view(tensor)
        shape = tile.type.static_shape
        try:
            corner = [self.value(o) for o in offsets]
            inside = prod(max(0, min(o + t, n) - max(o, 0))
                          for o, t, n in zip(corner, shape, view.shape))  # type: ignore[operator]
        except Unknown:
            inside = prod(shape)
            counts.approximate = True
        else:
            self._touch(view, tuple(corner), shape, direction)  # type: ignore[arg-type]
        self._add(counts, level, view, prod(shape) * view.bits // share,
                  inside * view.bits // share, direction)

    def _add(self, counts: Counts, level: str, view: View, issued: int, moved: int,
             direction: str) -> None:
        counts.issued[level] += issued
        counts.moved[level] += moved
        key = (view.pointer, direction)
        counts.tensor_issued[key] = counts.tensor_issued.get(key, 0) + issued
        counts.tensor_moved[key] = counts.tensor_moved.get(key, 0) + moved

    def _touch(self, view: View, corner: tuple[int, ...], shape: tuple[int, ...],
               direction: str) -> None:
        """A tile of `shape` at `corner` of `view` read or written (a hook: the footprint
        walk records it; counting needs nothing more)."""

    @staticmethod
    def _local(counts: Counts, level: str, tile: Tensor) -> None:
        bits = tile.type.num_elements * tile.dtype.bits
        counts.issued[level] += bits
        counts.moved[level] += bits


# ---- facts about the statements ----------------------------------------------------------

def sample(n: int) -> list[tuple[int, int, bool]]:
    """(index, weight, in the middle) standing for `range(n)`: every index up to
    `EXACT_EXTENT`; else the two first and two last, and the middle index of each of
    `SEGMENTS` runs between them, weighted by the run's length."""
    if n <= EXACT_EXTENT:
        return [(i, 1, False) for i in range(n)]
    inner = n - 4
    middle = []
    for s in range(SEGMENTS):
        a, b = 2 + inner * s // SEGMENTS, 2 + inner * (s + 1) // SEGMENTS
        if b > a:
            middle.append(((a + b - 1) // 2, b - a, True))
    return [(0, 1, False), (1, 1, False), *middle, (n - 2, 1, False), (n - 1, 1, False)]
