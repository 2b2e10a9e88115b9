"""Bytes moved between memory levels and FLOPs by unit, for one launch of a program.

    from tilevm.cost.traffic import analyze_traffic
    t = analyze_traffic(program, {"M": 1, "N": 12288, "K": 4096})
    t.total["global->register"], t.dram, t.flops["tensor_core"]

The rules (docs/cost-model.md tells them with the worked examples):

- Transfers, by instruction: `load_global` "global->register", `copy_async`
  "global->shared", `store_global` "register->global", `load_shared`
  "shared->register", `store_shared` "register->shared", a `dot` operand in shared
  memory (the tensor cores read it in place) "shared->register", `atomic_add` one
  element "register->global" (the read-modify-write happens in L2 and counts once; the
  old value it returns is not counted again). Bytes are elements times the element's
  bits / 8, so packed sub-byte data counts its packed bits (kernels read packed codes as
  bytes and `view` them, and a `view` moves nothing).
- Ragged edges: a tile that sticks out of its global tensor moves only its elements
  inside the bounds (a masked element is predicated off: no memory transaction). Those
  moved bytes are the totals (`total`); `issued` counts the whole tiles the
  instructions cover. A `copy_async(multicast=True)` is read once for the cluster: each
  block counts its share, 1 / cluster of the tile.
- Loops count their body once per iteration (bounds evaluated over the scalar
  arguments, the block index, enclosing loop variables and `let`s), so a tile loaded in
  a K loop counts per k-tile. A loop of more than `EXACT_EXTENT` iterations is
  sampled: its first two and last two iterations, and the middle of each of `SEGMENTS`
  equal runs between them standing for its run (`_sample`); a loop that updates a
  scalar variable (`AssignVar`) is walked iteration by iteration. Each grid axis the
  program reads (`block_idx`) is sampled the same way; an axis it never reads is walked
  once and weighted by its extent. Sampling is exact
  wherever a sampled run is uniform (divisible sizes, edges at the ends of a run); when
  the samples of one run differ (a causal diagonal), the result is marked approximate.
- `atomic_add`'s old value: the blocks that add to the same element (they differ only
  along the grid axes its offsets do not read) are taken to arrive in the order of
  their index along those axes, the element starting at zero: exactly one of n sees
  each of 0, v, ..., (n - 1) v, as in any real order, so split-K's "last block" branch
  counts once a tile.
- `if`: the branch its condition selects; a condition on a value the walk cannot know
  counts the larger branch for every block, and the result is marked approximate.
- FLOPs: `cost.flops` (tensor cores by `dot` shape, FMA pipes, conversions).
- DRAM ("dram"): per global tensor (a pointer argument), its footprint is the bytes of
  the distinct global views of it that the launch touches (at most what it moves). If
  the footprints of all tensors together (the working set) fit in `l2_bytes`, each
  tensor is read from DRAM once (its footprint, at most its moved reads); otherwise
  every read comes from DRAM (the moved reads: no reuse through L2 is assumed, which
  is what the closed forms of tiled kernels count). Writes reach DRAM once per byte
  written (the moved writes, at most the footprint).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import product
from math import prod

from tilevm.cost.flops import UNITS, instruction_flops
from tilevm.cost.scalars import CompiledExprs
from tilevm.cost.statements import (
    expr_axes,
    nested_statements,
    program_axes,
    statement_exprs,
    variable_axes,
)
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
from tilevm.ir.types import MemorySpace, Tensor

__all__ = ["LEVELS", "UNITS", "TensorTraffic", "Traffic", "analyze_traffic"]

LEVELS = ("global->register", "global->shared", "shared->register", "register->shared",
          "register->global")
EXACT_EXTENT = 16  # loops (and sampled grid axes) up to this many iterations: every one
SEGMENTS = 6  # runs a longer range is sampled in (besides its two first and two last)


@dataclass(frozen=True)
class TensorTraffic:
    """One global tensor (the memory of a pointer argument) over the whole launch, in
    bytes: `read` and `written` moved (inside the bounds), `issued_read` and
    `issued_written` the whole tiles, `footprint` the distinct bytes its touched views
    cover, `dram` the model's DRAM bytes (reads and writes) after L2 reuse."""

    read: int
    written: int
    issued_read: int
    issued_written: int
    footprint: int
    dram: int


@dataclass(frozen=True)
class Traffic:
    """What one launch moves and computes (module docstring for the rules). Bytes and
    FLOPs are integers.

    `total`: bytes moved between each pair of levels (`LEVELS`) over the launch, and
    "dram" (the same as `dram`); `issued`: the same for the whole tiles the instructions
    cover (ragged edges included); `per_block`: `total` over the grid's blocks (floor),
    `block_max`: the most any one block moves; `flops` and `flops_per_block` by unit
    (`UNITS`); `tensors`: by pointer argument; `working_set`: the tensors' footprints
    together; `approximate`: a sampled range was not uniform, or a condition could not
    be evaluated."""

    grid: tuple[int, int, int]
    total: Mapping[str, int]
    issued: Mapping[str, int]
    per_block: Mapping[str, int]
    block_max: Mapping[str, int]
    flops: Mapping[str, int]
    flops_per_block: Mapping[str, int]
    tensors: Mapping[str, TensorTraffic]
    dram: int
    working_set: int
    approximate: bool


def analyze_traffic(program: Program, scalars: Mapping[str, int | float], *,
                    l2_bytes: int = 0) -> Traffic:
    """The bytes and FLOPs of one launch of the specialized `program` with the scalar
    arguments `scalars` (by parameter name); `l2_bytes`: the L2 capacity the DRAM
    estimate assumes (0: no reuse through L2)."""
    if not isinstance(program, Program):
        raise TypeError(f"analyze_traffic takes a specialized Program, got "
                        f"{type(program).__name__} (call the kernel's .specialize(...))")
    context = _Context(program, _bind_scalars(program, scalars))
    grid = context.grid
    axes = program_axes(program)
    samples = [_sample(n) if axis in axes else [(0, n, False)] if n else []
               for axis, n in enumerate(grid)]
    total = _Counts()
    block_max = dict.fromkeys(LEVELS, 0)
    footprints: dict[object, tuple[str, int]] = {}
    runs: dict[tuple[int, tuple[int, ...]], set[tuple[int, ...]]] = {}
    for picks in product(*samples):
        block = tuple(index for index, _, _ in picks)
        weight = prod(w for _, w, _ in picks)
        counts = _Counts()
        _Walker(context, block).walk(program.body, counts)  # type: ignore[arg-type]
        total.add(counts, weight)
        for level, bits in counts.moved.items():
            block_max[level] = max(block_max[level], _bytes(bits))
        for axis, (_, _, interior) in enumerate(picks):
            if interior:
                others = block[:axis] + block[axis + 1:]
                runs.setdefault((axis, others), set()).add(counts.signature())
        for key, (pointer, bits, view_axes) in counts.views.items():
            # a view that differs along a sampled axis stands for as many distinct views
            # as its sample stands for blocks
            sampled = tuple((a, block[a]) for a in sorted(view_axes) if picks[a][1] > 1)
            footprints[(key, sampled)] = (pointer, bits * prod(picks[a][1] for a, _ in sampled))
    approximate = total.approximate or any(len(s) > 1 for s in runs.values())
    return _result(grid, total, block_max, footprints, approximate, l2_bytes)


def _result(grid: tuple[int, int, int], total: _Counts, block_max: dict[str, int],
            footprints: Mapping[object, tuple[str, int]], approximate: bool,
            l2_bytes: int) -> Traffic:
    blocks = prod(grid)
    covered: dict[str, int] = {}
    for pointer, bits in footprints.values():
        covered[pointer] = covered.get(pointer, 0) + bits
    pointers = sorted({p for p, _ in total.tensor_moved} | {p for p, _ in total.tensor_issued})
    moved = {(p, d): _bytes(total.tensor_moved.get((p, d), 0)) for p in pointers
             for d in ("read", "write")}
    footprint = {p: min(_bytes(covered.get(p, 0)), moved[p, "read"] + moved[p, "write"])
                 for p in pointers}
    working_set = sum(footprint.values())
    fits = working_set <= l2_bytes
    tensors = {}
    for p in pointers:
        read, written = moved[p, "read"], moved[p, "write"]
        dram = (min(read, footprint[p]) if fits else read) + min(written, footprint[p])
        tensors[p] = TensorTraffic(read, written,
                                   _bytes(total.tensor_issued.get((p, "read"), 0)),
                                   _bytes(total.tensor_issued.get((p, "write"), 0)),
                                   footprint[p], dram)
    dram = sum(t.dram for t in tensors.values())
    levels = {level: _bytes(total.moved[level]) for level in LEVELS}
    return Traffic(
        grid=grid, total={**levels, "dram": dram},
        issued={level: _bytes(total.issued[level]) for level in LEVELS},
        per_block={level: levels[level] // blocks if blocks else 0 for level in LEVELS},
        block_max=block_max,
        flops=dict(total.flops),
        flops_per_block={u: total.flops[u] // blocks if blocks else 0 for u in UNITS},
        tensors=tensors, dram=dram, working_set=working_set, approximate=approximate)


def _bytes(bits: int) -> int:
    return -(-bits // 8)


# ---- the launch's scalars and grid -------------------------------------------------------

def _bind_scalars(program: Program, scalars: Mapping[str, int | float]
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


class _Unknown(Exception):
    """A value only the run knows (the old value of an `atomic_add`)."""


_UNKNOWN = object()  # the value of such a variable


class _Context:
    """What every block's walk shares: the scalar arguments, and facts about the
    program's statements computed once (keyed by the statement's identity)."""

    def __init__(self, program: Program, scalars: dict[Var, int | float]) -> None:
        self.program = program
        self.scalars = scalars
        self.exprs = CompiledExprs()
        statements = list(nested_statements(program.body))
        var_axes = variable_axes(statements)
        self.view_axes = {id(s): frozenset().union(*(expr_axes(e, var_axes)
                                                     for e in statement_exprs(s)))
                          for s in statements if isinstance(s, GlobalView)}
        # per atomic_add, the grid axes its offsets read: the blocks that differ only
        # along the others add to the same element (`_Walker._atomic`)
        self.atomic_axes = {id(s): set().union(*(expr_axes(e, var_axes)
                                                  for e in s.offsets))
                            for s in statements if isinstance(s, AtomicAdd)}
        self.assigning_loops = {id(s) for s in statements if isinstance(s, For) and any(
            isinstance(t, AssignVar) for t in nested_statements(s.body))}
        self.grid = self._grid()

    def _grid(self) -> tuple[int, int, int]:
        """The launch grid, evaluated over the scalar arguments."""
        program = self.program
        if not 1 <= len(program.grid) <= 3:
            raise ValueError(f"kernel {program.name} has no grid (1 to 3 expressions)")
        dims = []
        for axis, e in enumerate(program.grid):
            try:
                n = evaluate(e, lambda v: self.scalars[v])
            except (VMError, KeyError) as err:
                raise ValueError(f"kernel {program.name}: grid dimension {axis} ({e}) "
                                 f"cannot be evaluated: {err}") from None
            if not isinstance(n, int) or n < 0:
                raise ValueError(f"kernel {program.name}: grid dimension {axis} ({e}) is "
                                 f"{n!r}, not a count of blocks")
            dims.append(n)
        return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


# ---- one block's walk --------------------------------------------------------------------

class _Counts:
    """What a walk adds up, in bits and operations (mutable, merged with weights)."""

    def __init__(self) -> None:
        self.moved = dict.fromkeys(LEVELS, 0)
        self.issued = dict.fromkeys(LEVELS, 0)
        self.flops = dict.fromkeys(UNITS, 0)
        self.tensor_moved: dict[tuple[str, str], int] = {}  # (pointer, read|write) -> bits
        self.tensor_issued: dict[tuple[str, str], int] = {}
        self.views: dict[object, tuple[str, int, frozenset[int]]] = {}  # pointer, bits, axes
        self.approximate = False

    def add(self, other: _Counts, weight: int) -> None:
        for mine, theirs in ((self.moved, other.moved), (self.issued, other.issued),
                             (self.flops, other.flops),
                             (self.tensor_moved, other.tensor_moved),
                             (self.tensor_issued, other.tensor_issued)):
            for key, value in theirs.items():
                mine[key] = mine.get(key, 0) + value * weight
        self.views.update(other.views)
        self.approximate |= other.approximate

    def signature(self) -> tuple[int, ...]:
        """The counts, to tell whether two samples of a run agree."""
        return (*self.moved.values(), *self.issued.values(), *self.flops.values())


@dataclass(frozen=True)
class _View:
    pointer: str
    bits: int  # of an element
    shape: tuple[int, ...]
    key: object  # the addresses it covers: equal keys, the same memory
    axes: frozenset[int]  # the grid axes its offset, sizes or strides read


class _Walker:
    """One block's walk over the statements, with the scalars' values in `env`."""

    def __init__(self, context: _Context, block: tuple[int, ...]) -> None:
        self.context = context
        self.block = (*block, 0, 0)[:3]
        self.env: dict[Var, object] = dict(context.scalars)
        self.views: dict[str, _View] = {}

    def value(self, e: Expr) -> int | float:
        try:
            return self.context.exprs.compiled(e)(self._lookup, self.block)
        except VMError as err:
            raise ValueError(f"kernel {self.context.program.name}: {e} cannot be evaluated "
                             f"in block {self.block}: {err.message}") from None

    def _lookup(self, var: Var) -> int | float:
        if var not in self.env:
            raise VMError(f"{var.name} has no value")
        value = self.env[var]
        if value is _UNKNOWN:
            raise _Unknown(var.name)
        return value  # type: ignore[return-value]

    def walk(self, stmt: Stmt, counts: _Counts) -> None:
        if isinstance(stmt, Seq):
            for s in stmt.body:
                self.walk(s, counts)
        elif isinstance(stmt, (Let, AssignVar)):
            try:
                self.env[stmt.var] = self.value(stmt.value)
            except _Unknown:
                self.env[stmt.var] = _UNKNOWN
        elif isinstance(stmt, If):
            self._branch(stmt, counts)
        elif isinstance(stmt, For):
            self._loop(stmt, counts)
        else:
            self._instruction(stmt, counts)

    def _branch(self, stmt: If, counts: _Counts) -> None:
        try:
            taken = stmt.then_body if self.value(stmt.cond) else stmt.else_body
        except _Unknown:  # both may run: the larger, marked approximate
            sides = []
            for body in (stmt.then_body, stmt.else_body or Seq()):
                side = _Counts()
                self.walk(body, side)
                sides.append(side)
            larger = max(sides, key=lambda c: (sum(c.moved.values()), sum(c.flops.values())))
            counts.add(larger, 1)
            counts.approximate = True
            return
        if taken is not None:
            self.walk(taken, counts)

    def _loop(self, stmt: For, counts: _Counts) -> None:
        try:
            start, stop, step = (self.value(e) for e in (stmt.start, stmt.stop, stmt.step))
        except _Unknown as unknown:
            raise ValueError(f"kernel {self.context.program.name}: the bounds of the loop "
                             f"over {stmt.var.name} read {unknown}, known only at run "
                             "time") from None
        if not all(isinstance(v, int) for v in (start, stop, step)) or step == 0:
            raise ValueError(f"kernel {self.context.program.name}: the loop over "
                             f"{stmt.var.name} has bounds {start}, {stop}, step {step}")
        trips = len(range(start, stop, step))  # type: ignore[arg-type]
        if trips <= EXACT_EXTENT or id(stmt) in self.context.assigning_loops:
            for i in range(trips):
                self.env[stmt.var] = start + i * step
                self.walk(stmt.body, counts)
            return
        run: set[tuple[int, ...]] = set()
        for i, weight, interior in _sample(trips):
            self.env[stmt.var] = start + i * step
            iteration = _Counts()
            self.walk(stmt.body, iteration)
            counts.add(iteration, weight)
            if interior:
                run.add(iteration.signature())
        counts.approximate |= len(run) > 1

    def _instruction(self, inst: Instruction, counts: _Counts) -> None:
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
        flops = instruction_flops(inst)
        if flops is not None:
            counts.flops[flops[0]] += flops[1]

    def _atomic(self, inst: AtomicAdd, counts: _Counts) -> None:
        """One element written; the old value by the arrival order of the module
        docstring (the block's rank along the axes its offsets do not read, times the
        value added)."""
        view = self._view(inst.dst)
        self._add(counts, "register->global", view, view.bits, view.bits, "write")
        rank, scale = 0, 1
        for axis, n in enumerate(self.context.grid):
            if axis not in self.context.atomic_axes[id(inst)]:
                rank += self.block[axis] * scale
                scale *= n
        try:
            self.env[inst.out] = self.value(inst.value) * rank
        except _Unknown:
            self.env[inst.out] = _UNKNOWN

    def _define_view(self, inst: GlobalView) -> None:
        try:
            offset = self.value(inst.offset)
            shape = tuple(self.value(s) if isinstance(s, Expr) else s
                          for s in inst.out.type.shape)
            strides = tuple(self.value(s) for s in inst.strides)
        except _Unknown as unknown:
            raise ValueError(f"kernel {self.context.program.name}: the global view "
                             f"%{inst.out.name} reads {unknown}, known only at run time"
                             ) from None
        if not all(isinstance(v, int) for v in (offset, *shape, *strides)):
            raise ValueError(f"kernel {self.context.program.name}: the global view "
                             f"%{inst.out.name} has a non-integer offset, size or stride")
        bits = inst.out.dtype.bits
        key = (inst.ptr.name, bits, offset, tuple(sorted(zip(shape, strides))))
        self.views[inst.out.name] = _View(inst.ptr.name, bits, shape, key,  # type: ignore[arg-type]
                                          self.context.view_axes[id(inst)])

    def _view(self, tensor: Tensor) -> _View:
        if tensor.name not in self.views:
            raise ValueError(f"kernel {self.context.program.name}: %{tensor.name} is not "
                             "a global view defined before its use")
        return self.views[tensor.name]

    def _global(self, counts: _Counts, level: str, tensor: Tensor, offsets: tuple[Expr, ...],
                tile: Tensor, direction: str, share: int = 1) -> None:
        view = self._view(tensor)
        shape = tile.type.static_shape
        try:
            corner = [self.value(o) for o in offsets]
            inside = prod(max(0, min(o + t, n) - max(o, 0))
                          for o, t, n in zip(corner, shape, view.shape))  # type: ignore[operator]
        except _Unknown:
            inside = prod(shape)
            counts.approximate = True
        self._add(counts, level, view, prod(shape) * view.bits // share,
                  inside * view.bits // share, direction)

    def _add(self, counts: _Counts, level: str, view: _View, issued: int, moved: int,
             direction: str) -> None:
        counts.issued[level] += issued
        counts.moved[level] += moved
        key = (view.pointer, direction)
        counts.tensor_issued[key] = counts.tensor_issued.get(key, 0) + issued
        counts.tensor_moved[key] = counts.tensor_moved.get(key, 0) + moved
        if moved:
            counts.views[view.key] = (view.pointer, prod(view.shape) * view.bits, view.axes)

    @staticmethod
    def _local(counts: _Counts, level: str, tile: Tensor) -> None:
        bits = tile.type.num_elements * tile.dtype.bits
        counts.issued[level] += bits
        counts.moved[level] += bits


# ---- facts about the statements ----------------------------------------------------------

def _sample(n: int) -> list[tuple[int, int, bool]]:
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
