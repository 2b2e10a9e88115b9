"""Which bytes of each global tensor one block reads and writes (its footprint), for the
DRAM model (`cost.dram`).

A block's walk (`cost.walk`) records each tile it moves as a box of its global view
(`regions.merge_box` joins a loop's tiles into panels); `Footprints.of_block` gives the
boxes in memory (`regions.Piece`), per tensor, reads and writes apart. A loop of up to
`EXACT_EXTENT` iterations is walked whole. A longer one is walked at its samples
(`walk.sample`): where each box moves by the same step at every sample, along one
dimension and by at most its extent, the loop covers the box from its first position to
its last (`_hull`: a k-loop's tiles make a panel); otherwise every iteration is walked.

Every block of the grid is walked. So that a large grid stays cheap, a loop that touches
global memory is walked once per distinct input: the boxes it records for a view depend
only on that view and on the values of the loop-invariant parts of its bounds,
conditions, `let`s and the view's own offsets (`_loop_inputs`). The matmul example's K
loop, for example, is walked once per row tile for A and once per column tile for B,
and the other blocks reuse those boxes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tilevm.cost.regions import Box, Piece, memory_pieces, merge_box
from tilevm.cost.statements import statement_exprs
from tilevm.cost.walk import EXACT_EXTENT, Context, Counts, Unknown, View, Walker, sample
from tilevm.ir.expr import Binary, Const, Expr, ScalarCast, Select, Unary, Var, free_vars
from tilevm.ir.instructions import (
    AtomicAdd,
    CopyAsync,
    GlobalView,
    Instruction,
    LoadGlobal,
    StoreGlobal,
)
from tilevm.ir.stmt import AssignVar, For, Let, Program, Stmt
from tilevm.ir.transform import nested_statements

__all__ = ["BlockFootprint", "Footprints"]

_MEMORY = (GlobalView, LoadGlobal, CopyAsync, StoreGlobal, AtomicAdd)
Touched = dict[tuple[View, str], list[Box]]  # (view, "read" | "write") -> merged boxes


@dataclass(frozen=True)
class BlockFootprint:
    """One block's memory, per pointer: the pieces it reads and those it writes."""

    reads: Mapping[str, frozenset[Piece]]
    writes: Mapping[str, frozenset[Piece]]
    approximate: bool


@dataclass(frozen=True)
class _LoopFacts:
    """A loop's inputs: per view it reads or writes (by name, defined before the loop),
    the expressions whose values decide its boxes (`_loop_inputs`); `walk_always`: a
    loop that assigns a variable, adds atomically or defines a view, whose effects last
    past it."""

    inputs: Mapping[str, tuple[Expr, ...]]
    walk_always: bool


class Footprints:
    """The footprints of the blocks of one launch (`of_block`), sharing the walks of
    loops with equal inputs."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.loops = _loop_facts(context.program)
        self.memo: dict[tuple[object, ...], tuple[list[tuple[tuple[View, str], Box]], bool]] = {}
        self._pieces: dict[tuple[View, Box], Piece | None] = {}

    def of_block(self, block: tuple[int, int, int]) -> BlockFootprint:
        walker = _FootprintWalker(self, block)
        counts = Counts()
        walker.walk(self.context.program.body, counts)  # type: ignore[arg-type]
        reads: dict[str, set[Piece]] = {}
        writes: dict[str, set[Piece]] = {}
        for (view, direction), boxes in walker.touched.items():
            into = reads if direction == "read" else writes
            for box in boxes:
                piece = self._piece(view, box)
                if piece is not None:
                    into.setdefault(view.pointer, set()).add(piece)
        return BlockFootprint({p: frozenset(s) for p, s in reads.items()},
                              {p: frozenset(s) for p, s in writes.items()},
                              counts.approximate or walker.approximate)

    def _piece(self, view: View, box: Box) -> Piece | None:
        key = (view, box)
        if key not in self._pieces:
            self._pieces[key] = memory_pieces(view.offset, view.shape, view.strides,
                                              view.bits, box)
        return self._pieces[key]


class _FootprintWalker(Walker):
    """A block's walk that records the boxes it touches and skips what touches no
    global memory."""

    def __init__(self, footprints: Footprints, block: tuple[int, int, int]) -> None:
        super().__init__(footprints.context, block)
        self.footprints = footprints
        self.touched: Touched = {}
        self.approximate = False

    def _touch(self, view: View, corner: tuple[int, ...], shape: tuple[int, ...],
               direction: str) -> None:
        box = (corner, tuple(c + t for c, t in zip(corner, shape)))
        merge_box(self.touched.setdefault((view, direction), []), box)

    def _instruction(self, inst: Instruction, counts: Counts) -> None:
        if isinstance(inst, _MEMORY):
            super()._instruction(inst, counts)

    def _loop(self, stmt: For, counts: Counts) -> None:
        facts = self.footprints.loops.get(id(stmt))
        if facts is None:  # nothing global inside, nothing that outlives it
            return
        keys = None if facts.walk_always else self._memo_keys(stmt, facts)
        memo = self.footprints.memo
        if keys and all(k in memo for k in keys.values()):
            for key in keys.values():
                boxes, approximate = memo[key]
                for where, box in boxes:
                    merge_box(self.touched.setdefault(where, []), box)
                self.approximate |= approximate
            return
        outer = self.touched
        start, step, trips = self.bounds(stmt)
        inner = Counts()
        mine = None
        if trips > EXACT_EXTENT and not facts.walk_always:
            walks = []
            for i, _, _ in sample(trips):
                self.touched = {}
                self.env[stmt.var] = start + i * step
                self.walk(stmt.body, inner)
                walks.append((i, self.touched))
            mine = _hull(walks, trips)
        if mine is None:  # every iteration
            self.touched = {}
            for i in range(trips):
                self.env[stmt.var] = start + i * step
                self.walk(stmt.body, inner)
            mine = self.touched
        self.touched = outer
        counts.approximate |= inner.approximate
        for where, boxes in mine.items():
            for box in boxes:
                merge_box(self.touched.setdefault(where, []), box)
        if keys is not None:
            for name, key in keys.items():
                view = self.views[name]
                memo[key] = ([(where, box) for where, boxes in mine.items()
                              if where[0] == view for box in boxes], inner.approximate)

    def _memo_keys(self, stmt: For, facts: _LoopFacts) -> dict[str, tuple[object, ...]] | None:
        """Per view the loop touches, the key of its boxes: the loop, the view, and the
        values of its inputs (None if one is not known before the run)."""
        keys = {}
        for name, inputs in facts.inputs.items():
            if name not in self.views:
                return None
            try:
                values = tuple(self.value(e) for e in inputs)
            except Unknown:
                return None
            keys[name] = (id(stmt), self.views[name], values)
        return keys


def _hull(walks: list[tuple[int, Touched]], trips: int) -> Touched | None:
    """The boxes of all `trips` iterations of a loop from those of the sampled ones
    (`walks`: (iteration, boxes), the first two among them), where each box moves by
    the same step every iteration (checked at every sample) along one dimension by at
    most its extent: the box from its first position to its last. None otherwise."""
    (first, start), (second, following) = walks[0], walks[1]
    if (first, second) != (0, 1):
        return None
    moves: dict[tuple[View, str], list[tuple[Box, tuple[int, ...]]]] = {}
    for where, boxes in start.items():
        nxt = sorted(following.get(where, ()))
        if len(nxt) != len(boxes):
            return None
        moves[where] = [((lo, hi), tuple(b - a for a, b in zip(lo, lo2)))
                        for (lo, hi), (lo2, hi2) in zip(sorted(boxes), nxt)
                        if [h - lo_ for lo_, h in zip(lo, hi)] ==
                        [h - lo_ for lo_, h in zip(lo2, hi2)]]
        if len(moves[where]) != len(boxes):
            return None
    for i, boxes in walks:
        if boxes.keys() != moves.keys():
            return None
        for where, moved in moves.items():
            expected = sorted((tuple(a + i * d for a, d in zip(lo, step)),
                               tuple(b + i * d for b, d in zip(hi, step)))
                              for (lo, hi), step in moved)
            if sorted(boxes[where]) != expected:
                return None
    hull: Touched = {}
    for where, moved in moves.items():
        for (lo, hi), step in moved:
            dims = [d for d, s in enumerate(step) if s]
            if len(dims) > 1 or dims and abs(step[dims[0]]) > hi[dims[0]] - lo[dims[0]]:
                return None
            for d in dims:
                reach = (trips - 1) * step[d]
                lo = (*lo[:d], lo[d] + min(0, reach), *lo[d + 1:])
                hi = (*hi[:d], hi[d] + max(0, reach), *hi[d + 1:])
            merge_box(hull.setdefault(where, []), (lo, hi))
    return hull


def _loop_facts(program: Program) -> dict[int, _LoopFacts]:
    """`_LoopFacts` of every loop that touches global memory or has lasting effects
    (absent: a loop the footprint walk can skip)."""
    facts = {}
    for loop in nested_statements(program.body):
        if not isinstance(loop, For):
            continue
        inside = list(nested_statements(loop.body))
        lasting = any(isinstance(s, (AssignVar, AtomicAdd, GlobalView)) for s in inside)
        touching = [s for s in inside if isinstance(s, (LoadGlobal, CopyAsync, StoreGlobal))]
        if not touching and not lasting:
            continue
        facts[id(loop)] = _LoopFacts(_loop_inputs(loop, inside), lasting)
    return facts


def _loop_inputs(loop: For, inside: list[Stmt]) -> dict[str, tuple[Expr, ...]]:
    """Per view name a loop reads or writes, the loop-invariant parts of what decides
    its boxes: the largest subexpressions that read no variable bound inside the loop,
    of the loop's bounds, conditions and `let`s (all of them: a `let` may feed any
    view) and of the view's own accesses. Every value the loop computes for the view is
    made of those and of its own variables."""
    bound = {loop.var} | {s.var for s in inside if isinstance(s, (For, Let, AssignVar))}
    shared: dict[Expr, None] = {}  # ordered sets
    own: dict[str, dict[Expr, None]] = {}
    for s in [loop, *inside]:
        if isinstance(s, (LoadGlobal, CopyAsync)):
            into = own.setdefault(s.src.name, {})
        elif isinstance(s, StoreGlobal):
            into = own.setdefault(s.dst.name, {})
        else:
            into = shared
        for e in statement_exprs(s):
            into.update(dict.fromkeys(_invariant_parts(e, bound)))
    return {name: (*shared, *(e for e in mine if e not in shared)) for name, mine in own.items()}


def _invariant_parts(e: Expr, bound: set[Var]) -> list[Expr]:
    """The largest subexpressions of `e` that read no variable of `bound` (constants
    left out: they never differ)."""
    if isinstance(e, Const):
        return []
    if not free_vars(e) & bound:
        return [e]
    if isinstance(e, Binary):
        return _invariant_parts(e.lhs, bound) + _invariant_parts(e.rhs, bound)
    if isinstance(e, (Unary, ScalarCast)):
        return _invariant_parts(e.operand, bound)
    if isinstance(e, Select):
        return [p for part in (e.cond, e.if_true, e.if_false)
                for p in _invariant_parts(part, bound)]
    return []  # a bound variable
