"""Pass `split_producer_warp`: the TMA copies of a program with a producer warp move to a
warp (warpgroup) of their own, and with a converting producer what computes the shared
tiles `dot`s read too.

Expects: a program after `lower_bit_packing` (every instruction's lowering chosen). A
program without a producer warp passes unchanged. With one (`tv.producer_warp()`), the
program must be splittable, else a `VMError` names the instruction in the way:
- every `copy_async` goes through TMA (`is_tma`; sm_90a, whole tiles of fixed views),
  and there is at least one;
- no other shared tensor shares a byte with a buffer the copies write
  (`shared_plan`), so that buffer's bytes are written only by its own copies and the
  barriers below order every reuse; except a tensor allocated where no copy can follow
  and every group was waited for (`copy_async_wait(0)`: an epilogue's tile in the
  stages' bytes), when the copies of this block and of its cluster are all done;
- a multicast copy splits into one slice per block of the cluster along its box's
  outermost dimension, each slice a whole number of the layout's swizzle periods (and
  of 128 bytes), and two multicast fills of a buffer are at most a ring apart
  (`multicast_refill_bound`);
- the copies' offsets, the bounds of the loops and the conditions of the branches
  around them are computed from scalars alone (parameters, `block_idx`, loop
  variables, `let`s of those), not from an instruction's result (`atomic_add`);
- every commit closes a group with at least one copy on every path (the producer arms
  a group's barrier only behind a copy's wait for its buffer, see below);
- the copy groups fit a ring of barriers (`tma_ring_bound` with `producer=True`).

Guarantees: `producer` is the producer warp's body: the statement tree of `body` with
only the scalar statements, the views and allocations, the copies and the commits
(loops and branches with none of those dropped). `body` is what the other warps run:
the same program in which
- a `copy_async` is the *release* of its buffer: once the wgmmas reading it are
  retired (`wgmma_waits` treats it as the write it stands for), each warp arrives on
  the buffer's "empty" barrier; the producer waits for that barrier's phase before the
  copy's bytes go in (the k-th copy into a buffer waits for the k-th release, written
  at the same place of the same control flow, so the counts always match);
- a `copy_async_commit` only counts the group, whose "full" barrier the producer
  arms, and `copy_async_wait` waits on it as before;
- a `sync` goes where no write other than a TMA copy (`store_shared`, `store_global`,
  `atomic_add`) lies between it and the syncs next to it on any path: it ordered the
  copies only, which the barriers now do. A `sync` left is a barrier of the
  `num_warps` warps only (`bar.sync 1`), the producer warp not among them.

With a converting producer (`Program.producer_converts`, a producer warpgroup): the
`store_shared`s into the tiles `dot`s read (`stored_operands`) and every instruction
that computes what they store, back through loop-carried tiles, move to the producer
too; refused (naming the instruction) when one of those is not a global load, cast,
view, `full`, `arange`, `where`, elementwise op or `assign`, when a value it computes is also
read by an instruction left to the other warps, when its result is not held by the
program's first 128 threads (replicated over the others, which the producer leaves
out), when a stored tile is also copied into, read by anything but a `dot`, or shares
bytes with another shared tensor. In `body` each such store stays as its tile's
release (`lowering=release`, its tile in both fields): once the wgmmas reading the tile
are retired each warp arrives on the tile's "empty" barrier, as for a copy; the
producer's k-th store into a tile waits for the k-th release, and then each producer
warp arrives on the tile's "full" barrier, which a `dot` reading it waits for (the
store it reads: the last one its warps released).

Why: with one block-wide `sync` per k-tile, the copies of k-tile t + lead wait for
the slowest warp to reach t, and every warp waits for every other; with the copies in
their own warp, a warp waits only for the copies it reads, and a buffer refills as
soon as the last wgmma reading it has retired (so `lead` may be `stages - 1`).
"""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np

from tilevm.backend.analysis.shared_memory import shared_plan
from tilevm.backend.analysis.tma import (
    RELEASE,
    is_release,
    is_tma,
    multicast_refill_bound,
    producer_buffers,
    stored_operands,
    tma_ring_bound,
)
from tilevm.backend.passes.context import DEFAULT_CONTEXT, PassContext
from tilevm.ir import dataflow
from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.expr import Expr, free_vars
from tilevm.ir.printer import format_instruction
from tilevm.ir.stmt import AssignVar, For, If, Let, Program, Seq, Stmt
from tilevm.ir.transform import instructions, map_seq
from tilevm.ir.types import MemorySpace, Tensor

# What the producer warp runs of the program: the copies and what addresses them, and
# the wait for the previous kernel (its copies read global memory that kernel writes).
PRODUCER_INSTRUCTIONS = (ins.GlobalView, ins.AllocShared, ins.CopyAsync,
                         ins.CopyAsyncCommit, ins.Assume, ins.WaitPrerequisites)
# Instructions that write their `dst` (other than a TMA copy, ordered by barriers).
WRITES = (ins.StoreShared, ins.StoreGlobal, ins.AtomicAdd, ins.CopyAsync)


def split_producer_warp(program: Program, context: PassContext = DEFAULT_CONTEXT) -> Program:
    if not program.producer_warps:
        return program
    try:
        _check_copies(program)
        converted = _converted(program)  # ids: the stores moved, and what computes them
    except VMError as exc:  # a problem of the whole program: at the tv.producer_warp line
        if exc.loc is not None:
            raise
        raise VMError(exc.message, exc.instruction, program.producer_loc) from None
    tainted = _results_of_instructions(program.body)
    producer = _producer_body(program.body, tainted, converted)
    consumers = _without_copy_syncs(_released(program.body, converted))
    return replace(program, body=consumers, producer=producer)


# What a converting producer may compute a stored tile with (register in, register out).
CONVERTING_INSTRUCTIONS = (ins.LoadGlobal, ins.Cast, ins.View, ins.Elementwise, ins.Full,
                           ins.Arange, ins.Where, ins.Assign)
def _converted(program: Program) -> set[int]:
    """With a converting producer: the ids of the `store_shared`s into the tiles `dot`s
    read (`stored_operands`) and of every instruction that computes what they store,
    back through loop-carried tiles (the producer runs them, the other warps do not);
    empty otherwise. Refuses a split the module docstring rules out."""
    stored = set(stored_operands(program))
    if not stored:
        if program.producer_converts:
            raise _fail("converts=True, but no store_shared writes a shared tile that a "
                        "dot reads (there is nothing to convert in the producer)")
        return set()
    everything = instructions(program.body)
    defining: dict[str, list[ins.Instruction]] = {}
    for inst in everything:
        for name in _defines(inst):
            defining.setdefault(name, []).append(inst)
        if isinstance(inst, ins.CopyAsync) and inst.dst.name in stored:
            raise _fail(f"%{inst.dst.name} is both copied into and stored by the converting "
                        "producer: its full barrier counts stores only", inst)
        if not isinstance(inst, (ins.Dot, ins.StoreShared, ins.AllocShared)) and any(
                t.name in stored for t in _inputs(inst)):
            raise _fail("this instruction reads a tile the converting producer stores; "
                        "only dots may read those (the producer stores them behind "
                        "barriers that only dots wait on)", inst)
    chosen: dict[int, ins.Instruction] = {}
    work = [i for i in everything if isinstance(i, ins.StoreShared) and i.dst.name in stored]
    while work:
        inst = work.pop()
        if id(inst) in chosen:
            continue
        if not isinstance(inst, (ins.StoreShared, *CONVERTING_INSTRUCTIONS)):
            raise _fail(f"the converting producer would run this {inst.opname} to compute a "
                        "stored tile; it runs global loads, casts, views, full, arange, where, "
                        "elementwise arithmetic and assigns only", inst)
        chosen[id(inst)] = inst
        for t in _inputs(inst):
            if t.space is MemorySpace.REGISTER:
                work += defining.get(t.name, [])
    threads = 32 * program.producer_warps
    for inst in chosen.values():
        out = _defined(inst)
        if out is not None and not _held_by_first(out.layout, threads):
            raise _fail(f"the converting producer runs this {inst.opname} as the program's "
                        f"first {threads} threads do: lay %{out.name} out over those "
                        f"(replicated over the others), not {out.layout}", inst)
    made = {name for inst in chosen.values() for name in _defines(inst)}
    for inst in everything:
        if id(inst) not in chosen:
            used = next((t.name for t in _inputs(inst) if t.name in made), None)
            if used is not None:
                raise _fail(f"%{used} is computed for a tile the converting producer stores, "
                            "and this instruction of the other warps reads it too", inst)
    return set(chosen)


def _held_by_first(layout, threads: int) -> bool:
    """Whether each thread of `layout` holds what thread `t % threads` holds (the first
    `threads` threads hold everything, the others copies)."""
    table = layout.table()  # [thread, local, dim]
    return bool((table == table[np.arange(len(table)) % threads]).all())


def _defined(inst: ins.Instruction) -> Tensor | None:
    """The tile `inst` writes in registers: its `output`, or an `assign`'s `dst`."""
    return inst.dst if isinstance(inst, ins.Assign) else inst.output


def _defines(inst: ins.Instruction) -> list[str]:
    """The name of `_defined(inst)`, if any."""
    out = _defined(inst)
    return [] if out is None else [out.name]


def _inputs(inst: ins.Instruction) -> list[Tensor]:
    """The tensors `inst` reads: its `input_tensors()` less the `dst` it only writes (a
    store's, a copy's, an assign's; an atomic add reads its own)."""
    overwrites = isinstance(inst, (*WRITES, ins.Assign)) and not isinstance(inst, ins.AtomicAdd)
    return [t for t in inst.input_tensors() if not (overwrites and t is inst.dst)]


def _released(seq: Seq, converted: set[int]) -> Seq:
    """`seq` for the other warps: the instructions that compute the stored tiles go, and
    each store into one stays as its release (`RELEASE`; what it stored is the
    producer's: the release names its tile in both fields, so the body reads back)."""
    def keep(inst: ins.Instruction) -> ins.Instruction | None:
        if id(inst) not in converted:
            return inst
        if isinstance(inst, ins.StoreShared):
            return replace(inst, src=inst.dst, lowering=RELEASE)
        return None
    return map_seq(seq, keep)


def _fail(message: str, inst: ins.Instruction | None = None) -> VMError:
    return VMError(f"tv.producer_warp(): {message}",
                   format_instruction(inst) if inst is not None else None,
                   inst.loc if inst is not None else None)


def _check_copies(program: Program) -> None:
    copies = [i for i in instructions(program.body) if isinstance(i, ins.CopyAsync)]
    if not copies:
        raise _fail("the program has no copy_async for the producer warp to issue")
    for copy in copies:
        if not is_tma(copy):
            raise _fail("this copy_async does not go through TMA (the producer warp needs "
                        "--arch sm_90a and copies of whole tiles from views fixed for the "
                        "launch)", copy)
        if copy.multicast:
            _check_multicast_slices(copy, program.cluster)
    if multicast_refill_bound(program) is None:
        raise _fail("a buffer is filled by multicast copies more than 8 commit groups "
                    "apart (the ring of barriers those copies complete on has at most 8)")
    plan = shared_plan(program)
    after = _allocated_after_the_copies(program.body)
    stored = stored_operands(program)
    for name in producer_buffers(program):
        mine = plan.allocations[name]
        for other in plan.allocations.values():
            if other.name != name and other.offset < mine.offset + mine.size \
                    and mine.offset < other.offset + other.size:
                alloc = next(i for i in instructions(program.body)
                             if isinstance(i, ins.AllocShared) and i.out.name == other.name)
                # (after the last copy; a converting producer may store a tile past
                # the last that a dot reads, so its tiles keep their bytes throughout)
                if id(alloc) in after and name not in stored:
                    continue
                writer = "the converting producer stores" if name in stored else \
                    "TMA copies write"
                raise _fail(f"%{other.name} reuses bytes of %{name}, which {writer}: "
                            "the producer warp's barriers order a buffer's own uses only "
                            f"(keep %{name} allocated for the whole kernel)", alloc)

    def group_has_copies(inst: ins.Instruction, copied: bool) -> bool:
        if isinstance(inst, ins.CopyAsyncCommit):
            if not copied:
                raise _fail("this commit's group may have no copy (on some path no "
                            "copy_async comes after the previous commit); with a "
                            "producer warp every group must have one, since only a "
                            "copy waits for the consumers to be done with the group's "
                            "barrier", inst)
            return False
        return copied or isinstance(inst, ins.CopyAsync)

    dataflow.walk(program.body, True, group_has_copies, bool.__and__)
    if tma_ring_bound(program, producer=True) is None:
        raise _fail("the copy groups cannot share a ring of barriers (more than 8 in "
                    "flight, or copies still in flight when the kernel ends)")


def _check_multicast_slices(copy: ins.CopyAsync, cluster: int) -> None:
    """Each block of the cluster fetches one slice of the box, along its outermost
    dimension (`lowering.tma`): the slices must be equal, whole rows, and start where
    the layout's swizzle pattern does."""
    box = [int(b) for b in str(copy.lowering["box"]).split(",")]
    slice_bytes = int(copy.lowering["bytes"]) // cluster
    swizzle = copy.dst.layout.swizzle
    period = max(128, swizzle.period if swizzle is not None else 0)
    if box[-1] % cluster or slice_bytes % period:
        raise _fail(f"this multicast copy's box ({' x '.join(map(str, reversed(box)))}, "
                    f"outermost first) does not split into {cluster} slices of its "
                    f"outermost dimension, each a multiple of {period} bytes (one slice a "
                    "block of the cluster)", copy)


def _allocated_after_the_copies(body: Seq) -> set[int]:
    """The `alloc_shared`s (by id) that no `copy_async` can follow, on any path, and
    before which every copy group was waited for (a `copy_async_wait(0)` since the last
    copy): their bytes may be the copies' buffers', whose writes are all over by then
    (a multicast's too: this block's waits counted the whole cluster's bytes)."""
    copy_ahead: dict[int, bool] = {}
    in_flight: dict[int, bool] = {}

    def backward(inst: ins.Instruction, ahead: bool) -> bool:
        if isinstance(inst, ins.AllocShared):
            copy_ahead[id(inst)] = ahead
        return ahead or isinstance(inst, ins.CopyAsync)

    def forward(inst: ins.Instruction, state: tuple[bool, bool]) -> tuple[bool, bool]:
        pending, open_ = state  # copies not yet waited for; copies not yet committed
        if isinstance(inst, ins.AllocShared):
            in_flight[id(inst)] = pending
        if isinstance(inst, ins.CopyAsync):
            return True, True
        if isinstance(inst, ins.CopyAsyncCommit):
            return pending, False
        if isinstance(inst, ins.CopyAsyncWait) and inst.n == 0:
            return open_, open_  # (a wait retires committed groups only)
        return state

    dataflow.walk(body, False, backward, bool.__or__, backward=True)
    dataflow.walk(body, (False, False), forward,
                  lambda a, b: (a[0] or b[0], a[1] or b[1]))
    return {key for key, ahead in copy_ahead.items() if not ahead and not in_flight[key]}


def _bodies(stmt: Stmt) -> tuple[Seq, ...]:
    if isinstance(stmt, Seq):
        return (stmt,)
    if isinstance(stmt, For):
        return (stmt.body,)
    if isinstance(stmt, If):
        return (stmt.then_body,) + (() if stmt.else_body is None else (stmt.else_body,))
    return ()


def _results_of_instructions(body: Seq) -> set[str]:
    """Scalars the producer cannot compute: instruction results (`atomic_add`'s old
    value) and every variable assigned from one."""
    tainted: set[str] = set()

    def visit(seq: Seq) -> None:
        for stmt in seq.body:
            if isinstance(stmt, ins.AtomicAdd):
                tainted.add(stmt.out.name)
            elif isinstance(stmt, (Let, AssignVar)) and _reads(stmt.value, tainted):
                tainted.add(stmt.var.name)
            for inner in _bodies(stmt):
                visit(inner)

    while True:  # until a loop carries no new tainted value back to its start
        known = len(tainted)
        visit(body)
        if len(tainted) == known:
            return tainted


def _reads(expr: Expr, names: set[str]) -> bool:
    return any(v.name in names for v in free_vars(expr))


def _producer_body(seq: Seq, tainted: set[str], converted: set[int]) -> Seq:
    """`seq` with the producer's statements only (see the module docstring)."""
    kept: list[Stmt] = []
    for stmt in seq.body:
        if isinstance(stmt, ins.Instruction):
            if id(stmt) in converted:
                kept.append(stmt)
            elif isinstance(stmt, PRODUCER_INSTRUCTIONS):
                if isinstance(stmt, ins.CopyAsync) and any(_reads(o, tainted)
                                                           for o in stmt.offsets):
                    raise _fail("this copy's offsets are computed from an instruction's "
                                "result, which the producer warp does not have", stmt)
                kept.append(stmt)
        elif isinstance(stmt, (Let, AssignVar)):
            if stmt.var.name not in tainted:
                kept.append(stmt)
        elif isinstance(stmt, Seq):
            kept.extend(_producer_body(stmt, tainted, converted).body)
        elif isinstance(stmt, For):
            body = _producer_body(stmt.body, tainted, converted)
            if _issues(body, converted):
                if any(_reads(e, tainted) for e in (stmt.start, stmt.stop, stmt.step)):
                    raise _fail(f"the bounds of loop {stmt.var.name} (line "
                                f"{stmt.loc.line if stmt.loc else '?'}) are computed from "
                                "an instruction's result; the producer warp runs the loop "
                                "to issue its copies")
                kept.append(replace(stmt, body=body))
        elif isinstance(stmt, If):
            then = _producer_body(stmt.then_body, tainted, converted)
            other = None if stmt.else_body is None else _producer_body(stmt.else_body,
                                                                        tainted, converted)
            if _issues(then, converted) or (other is not None and _issues(other, converted)):
                if _reads(stmt.cond, tainted):
                    raise _fail(f"the condition of the if at line "
                                f"{stmt.loc.line if stmt.loc else '?'} is computed from "
                                "an instruction's result; the producer warp needs it to "
                                "issue the copies inside")
                kept.append(replace(stmt, then_body=then, else_body=other))
    return Seq(body=tuple(kept))


def _issues(seq: Seq, converted: set[int]) -> bool:
    """Whether `seq` issues a copy or a commit, runs a converting instruction, or
    assigns a scalar (which later copies may read)."""
    for stmt in seq.body:
        if isinstance(stmt, (ins.CopyAsync, ins.CopyAsyncCommit, AssignVar)) or \
                id(stmt) in converted:
            return True
        if any(_issues(b, converted) for b in _bodies(stmt)):
            return True
    return False


def accesses(inst: ins.Instruction) -> frozenset[tuple[MemorySpace, str]]:
    """What a `sync` may have to order about `inst` between warps: (space, "read" or
    "write") for each shared or global tensor it accesses. A TMA copy has none: its
    global reads and shared writes are ordered by barriers and waits, never by a
    `sync` (an asynchronous copy is in flight across one anyway)."""
    if is_tma(inst) or is_release(inst) or \
            isinstance(inst, (ins.AllocShared, ins.FreeShared, ins.GlobalView)):
        return frozenset()
    found = set()
    for f in fields(inst):
        for value in _tensors(getattr(inst, f.name)):
            if value.space is not MemorySpace.REGISTER:
                written = f.name == "dst" and isinstance(inst, WRITES)
                found.add((value.space, "write" if written else "read"))
                if isinstance(inst, ins.AtomicAdd):
                    found.add((value.space, "read"))
    return frozenset(found)


def _tensors(value: object) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, tuple):
        return [t for v in value for t in _tensors(v)]
    return []


def _conflict(before: frozenset, after: frozenset) -> bool:
    """Whether accesses on the two sides of a `sync` include a write and another access
    of the same memory space."""
    return any(space == other and "write" in (kind, other_kind)
               for space, kind in before for other, other_kind in after)


def _without_copy_syncs(body: Seq) -> Seq:
    """`body` without the syncs that order TMA copies only (module docstring)."""
    # Per sync, the accesses since the syncs kept before it and until those kept after
    # it, on any path (a loop's body is walked until its states settle; the last walk,
    # with the settled states, is the one recorded). Dropping a sync merges its two
    # windows, so they are recomputed after each one dropped.
    dropped: set[int] = set()
    while True:
        before: dict[int, frozenset] = {}
        after: dict[int, frozenset] = {}
        for side, backward in ((before, False), (after, True)):
            def step(inst: ins.Instruction, seen: frozenset, side=side) -> frozenset:
                if isinstance(inst, ins.Sync) and id(inst) not in dropped:
                    side[id(inst)] = seen
                    return frozenset()
                return seen | accesses(inst)

            dataflow.walk(body, frozenset(), step, frozenset.union, backward=backward)
        spare = next((key for key in before if not _conflict(before[key], after[key])),
                     None)
        if spare is None:
            break
        dropped.add(spare)
    needed = set(before)
    return map_seq(body, lambda i: None if isinstance(i, ins.Sync) and id(i) not in needed
                   else i)
