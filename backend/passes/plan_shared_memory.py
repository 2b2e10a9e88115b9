"""Pass `plan_shared_memory`: give every shared tensor a layout and a byte offset in the
block's one dynamic shared-memory buffer.

Expects: a verified program (after `infer_layouts`). Guarantees: every shared tensor
(definition and uses) has a `SharedLayout`; `shared_plan(program)` of the result gives
each `alloc_shared` tensor a byte offset such that

- the offset is a multiple of the tensor's alignment, `max(16, swizzle.period)` (16 bytes
  for 16-byte vector accesses and `cp.async`; the swizzle period so that XOR-swizzling
  the buffer offset `offset + b` equals `offset + swizzle(b)`, as `SharedLayout` means);
- `base_align`, the alignment the buffer's start is declared with, is the largest of
  those but at most `MAX_BASE_ALIGN` (1024 bytes), what the GPU gives the start. Beyond
  that nothing needs it: offsets and swizzles are computed from the buffer's start, and
  only the hardware's own swizzles (TMA copies and wgmma operands, at most the 128-byte
  swizzle, period 1024) read absolute addresses. Declaring more would be false: LLVM
  takes the declared alignment as zero bits of the address (an H100 placed a buffer
  declared `.align 2048` at 1024 mod 2048, and the wgmma descriptors, built without
  bit 10, read operands 1024 bytes off; bench/results/wgmma_tile_store/);
- tensors that may be live at the same time never share a byte;
- `total_bytes` (a multiple of 16) covers every tensor: it is the size of the dynamic
  shared memory a launch must ask for (`CompiledKernel.shared_bytes`);
- a program with an `atomic_add` gets `scratch_offset`: 16 bytes past every tensor,
  through which an instruction hands one thread's value to the block (a static shared
  variable instead would sit before the dynamic buffer and push its aligned start up
  to `base_align` bytes).

Layout of a tensor created without one: `swizzled(shape, dtype)` when the tile is 2-D with
rows of at least 16 bytes (the swizzle of `ldmatrix_swizzle`: 16-byte chunks move within
their row, so 16-byte accesses and ldmatrix phases stay conflict-free; rows that are not
a whole number of 16-byte chunks stay unswizzled), else `row_major(shape, dtype)`.
Layouts change no result: every access goes through the layout.

The plan is a pure function of the program, so it is not stored in the IR: this pass
sets the layouts (and checks the plan can be made), and codegen and the pipeline call
`shared_plan` on the program they hold (the lowering memoizes it per kernel).

Liveness, over instructions in program order (loops and branches flattened):
- a tensor is live from its `alloc_shared` to its `free_shared`; never freed: to the end
  of the program (an unfreed tile may still receive an in-flight `copy_async`);
- a tensor allocated inside a `for` is live for the whole of the innermost loop around
  its allocation (every iteration reuses the same bytes); and when its range reaches
  past the end of an enclosing loop (never freed, or no barrier before the loop ends), for
  the whole of that loop too (the loop's next iteration runs while it is still live);
- freed bytes become reusable only once a `sync` has run after the tensor's last access
  (another thread may still be reading it until a barrier): the live range extends to
  the first `sync` after the last access that surely runs after it (in the same block or
  an enclosing one, not inside an `if` or a later loop); with none, the bytes are never
  reused.
Placement: linear scan in order of live-range start, first fit: the lowest aligned
offset that overlaps no tensor whose live range intersects this one.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilevm.ir import dataflow
from tilevm.ir import instructions as ins
from tilevm.ir.stmt import For, If, Program, Seq
from tilevm.ir.transform import instructions, map_tensors
from tilevm.ir.types import MemorySpace, Tensor
from tilevm.layouts.shared_layout import SharedLayout, row_major, swizzled

MIN_ALIGN = 16  # bytes: 16-byte vector accesses and cp.async chunks
MAX_BASE_ALIGN = 1024  # bytes: the most the buffer's start is declared aligned to (above)


def default_shared_layout(tensor: Tensor) -> SharedLayout:
    """The layout the planner gives a shared tensor created without one (see above)."""
    shape = tensor.type.static_shape
    if len(shape) == 2 and shape[-1] * tensor.dtype.bits >= 8 * 16:
        return swizzled(shape, tensor.dtype)
    return row_major(shape, tensor.dtype)


def alignment(layout: SharedLayout) -> int:
    """Byte alignment of an allocation with `layout`."""
    period = layout.swizzle.period if layout.swizzle is not None else 1
    return max(MIN_ALIGN, period)


@dataclass(frozen=True)
class Allocation:
    name: str
    layout: SharedLayout
    offset: int  # bytes from the start of the dynamic shared-memory buffer
    size: int  # bytes (`layout.size_bytes`)
    align: int
    start: int  # live range: instruction indices in program order, inclusive
    end: int


@dataclass(frozen=True)
class SharedPlan:
    allocations: dict[str, Allocation]  # by tensor name
    total_bytes: int
    base_align: int  # the buffer's start is aligned to this (see the module docstring)
    scratch_offset: int | None = None  # 16 bytes for block-wide hand-overs, if needed
    barrier_offset: int | None = None  # `barriers` 8-byte TMA mbarriers (`tma_barriers`)
    barriers: int = 0

    def offset(self, name: str) -> int:
        return self.allocations[name].offset


def plan_shared_memory(program: Program) -> Program:
    """The program with a `SharedLayout` on every shared tensor (see the module docstring)."""
    chosen: dict[str, SharedLayout] = {}

    def with_layout(t: Tensor) -> Tensor:
        if t.space is not MemorySpace.SHARED or t.layout is not None:
            return t
        if t.name not in chosen:
            chosen[t.name] = default_shared_layout(t)
        return Tensor(t.name, t.type.with_layout(chosen[t.name]))

    out = map_tensors(program, with_layout)
    shared_plan(out)  # every tensor can be placed
    return out


def _live_ranges(program: Program) -> dict[str, tuple[int, int, Tensor]]:
    """Per allocated tensor: its live range (start, end) in program order, and itself."""
    counter = 0
    # name -> [alloc index, free index or None, tensor, enclosing loops ([first, last],
    #          outermost first), (index, enclosing statements) of the last access]
    allocs: dict[str, list] = {}
    syncs: list[tuple[int, tuple[int, ...]]] = []

    def walk(seq: Seq, loops: tuple[list[int], ...], chain: tuple[int, ...]) -> None:
        nonlocal counter
        for stmt in seq.body:
            if isinstance(stmt, ins.Instruction):
                index = counter
                counter += 1
                if isinstance(stmt, ins.AllocShared):
                    allocs[stmt.out.name] = [index, None, stmt.out, loops, (index, chain)]
                elif isinstance(stmt, ins.FreeShared):
                    if stmt.tensor.name in allocs:
                        allocs[stmt.tensor.name][1] = index
                elif isinstance(stmt, ins.Sync):
                    syncs.append((index, chain))
                else:
                    for t in stmt.input_tensors():
                        if t.name in allocs:
                            allocs[t.name][4] = (index, chain)
            elif isinstance(stmt, Seq):
                walk(stmt, loops, chain)
            elif isinstance(stmt, For):
                bounds = [counter, counter]  # the last index is known once the body is walked
                walk(stmt.body, (*loops, bounds), (*chain, id(stmt)))
                bounds[1] = max(counter - 1, bounds[0])
            elif isinstance(stmt, If):
                walk(stmt.then_body, loops, (*chain, id(stmt), 0))
                if stmt.else_body is not None:
                    walk(stmt.else_body, loops, (*chain, id(stmt), 1))

    walk(program.body, (), ())
    end_of_program = max(counter, 1)
    ranges = {}
    for name, (start, end, tensor, loops, (last, chain)) in allocs.items():
        if loops and end is not None:
            end = loops[-1][1]
        if end is not None:
            # The first barrier that surely runs after the last access (one in the same or
            # an enclosing block, never one in a branch or a later loop) must pass first.
            barrier = next((i for i, c in syncs if i > last and chain[:len(c)] == c), None)
            end = None if barrier is None else max(end, barrier)
        end = end_of_program if end is None else end
        if loops:  # the whole innermost loop
            start = loops[-1][0]
        for first, stop in loops:  # and every loop the range leaves (its next iteration)
            if end > stop:
                start = min(start, first)
        ranges[name] = (start, end, tensor)
    return ranges


def shared_plan(program: Program) -> SharedPlan:
    """Offsets of every `alloc_shared` tensor of a program whose shared tensors all have
    layouts (the output of `plan_shared_memory`)."""
    ranges = _live_ranges(program)
    placed: list[Allocation] = []
    for name, (start, end, tensor) in sorted(ranges.items(), key=lambda kv: kv[1][0]):
        layout = tensor.layout if tensor.layout is not None else default_shared_layout(tensor)
        size, align = layout.size_bytes, alignment(layout)
        live = sorted((a for a in placed if a.end >= start and a.start <= end),
                      key=lambda a: a.offset)
        offset = 0
        for other in live:  # first fit between the live tensors, lowest offset first
            if offset + size <= other.offset:
                break
            offset = max(offset, -(-(other.offset + other.size) // align) * align)
        placed.append(Allocation(name, layout, offset, size, align, start, end))
    total = max((a.offset + a.size for a in placed), default=0)
    total = -(-total // MIN_ALIGN) * MIN_ALIGN
    scratch = None
    if any(isinstance(i, ins.AtomicAdd) for i in instructions(program.body)):
        scratch, total = total, total + MIN_ALIGN
    barrier_offset, barriers = None, tma_barriers(program)
    if barriers:
        barrier_offset = total
        total += -(-8 * barriers // MIN_ALIGN) * MIN_ALIGN
    base_align = min(max((a.align for a in placed), default=MIN_ALIGN), MAX_BASE_ALIGN)
    return SharedPlan({a.name: a for a in placed}, total, base_align, scratch,
                      barrier_offset, barriers)


def is_tma(inst: ins.Instruction) -> bool:
    """A `copy_async` that `select_instructions` sent through the tensor memory
    accelerator (form `tma(...)`)."""
    return isinstance(inst, ins.CopyAsync) and inst.lowering is not None \
        and inst.lowering.name == "tma"


def tma_ring(program: Program) -> int:
    """mbarriers a program whose `copy_async`s go through TMA needs for its groups (0
    otherwise)."""
    if not any(is_tma(i) for i in instructions(program.body)):
        return 0
    ring = tma_ring_bound(program, producer=bool(program.producer_warps))
    assert ring is not None, "TMA selected for a program whose groups cannot use a ring"
    refill = multicast_refill_bound(program)
    assert refill is not None, "multicast copies whose buffers a ring cannot serve"
    return max(ring, refill)


def tma_barriers(program: Program) -> int:
    """All the mbarriers of its TMA copies: the groups' ring, and with a producer warp
    one "empty" barrier per buffer the producer writes (`producer_buffers`), after it,
    then with a converting producer a "full" barrier per tile it stores
    (`stored_operands`; `split_producer_warp`)."""
    ring = tma_ring(program)
    if not ring or not program.producer_warps:
        return ring
    return ring + len(producer_buffers(program)) + len(stored_operands(program))


def stored_operands(program: Program) -> tuple[str, ...]:
    """With a converting producer (`Program.producer_converts`), the shared tiles that
    `dot`s read and `store_shared`s write, in order of first store: the producer computes
    and stores them (`split_producer_warp`). Empty otherwise."""
    if not program.producer_converts:
        return ()
    read = {t.name for i in instructions(program.body) if isinstance(i, ins.Dot)
            for t in (i.a, i.b) if t.space is MemorySpace.SHARED}
    return tuple(dict.fromkeys(i.dst.name for i in instructions(program.body)
                               if isinstance(i, ins.StoreShared) and i.dst.name in read))


def producer_buffers(program: Program) -> tuple[str, ...]:
    """The shared tensors a producer warp writes (`tma_destinations`, then
    `stored_operands`): one "empty" barrier each, which the other warps' releases
    complete."""
    return tma_destinations(program) + stored_operands(program)


def tma_destinations(program: Program) -> tuple[str, ...]:
    """The shared tensors TMA copies write, in order of first copy: one "empty" barrier
    each when the program has a producer warp."""
    return tuple(dict.fromkeys(i.dst.name for i in instructions(program.body) if is_tma(i)))


_MAX_RING = 8  # more groups pending than this: the copies keep `cp.async`


def multicast_refill_bound(program: Program) -> int | None:
    """The most commit groups between two multicast copies into one buffer, on any
    path (0 without multicast copies); None when more than the ring may have.

    Why the ring must be at least that long: a block's group j barrier also counts the
    bytes the other blocks of its cluster multicast into it, and a peer issues its
    slice of group j as soon as every block has released the buffer's previous fill
    (group j - d), not when this block is done with the groups in between. Had the ring
    fewer than d barriers, group j's bytes could land on a barrier still counting an
    earlier group's; with d or more, the barrier group j shares was group j - d's or
    older, which this block waited for before it released the buffer."""
    State = tuple[tuple[str, int], ...]  # buffer -> commits since its last multicast fill
    bound = 0

    def step(inst: ins.Instruction, state: State) -> State:
        nonlocal bound
        if isinstance(inst, ins.CopyAsyncCommit):
            return tuple((name, min(n + 1, _MAX_RING + 1)) for name, n in state)
        if isinstance(inst, ins.CopyAsync) and inst.multicast:
            since = dict(state)
            bound = max(bound, since.get(inst.dst.name, 0))
            since[inst.dst.name] = 0
            return tuple(sorted(since.items()))
        return state

    def join(a: State, b: State) -> State:
        merged = dict(a)
        for name, n in b:
            merged[name] = max(n, merged.get(name, 0))
        return tuple(sorted(merged.items()))

    dataflow.walk(program.body, (), step, join)
    return bound if bound <= _MAX_RING else None


def tma_ring_bound(program: Program, producer: bool = False) -> int | None:
    """The ring of mbarriers TMA copies of this program would need: the most commit
    groups pending (committed, not yet retired by a `copy_async_wait`) right after a
    commit, on any path; None when no ring is safe.

    `producer`: the copies are issued by a producer warp (`split_producer_warp`), which
    arms group j's barrier once every warp has passed the program's first copy of group
    j: the ring is then the most groups pending at a group's first copy, counting it,
    and every other warp is done polling group `j - R` by then (it retired it before
    that copy, and each warp releases a buffer only after all its lanes got there), so
    no `sync` is needed between a wait and a copy.

    Group j owns barrier `j % R`, and group `j + R` reuses it. That is safe when every
    thread is done waiting on group j before group `j + R` is issued: j is retired by
    then (at most R pending after each commit) and, which None reports as violated, a
    `sync` lies between every `copy_async_wait` and the next `copy_async` (else a thread
    still polling j's phase could see the barrier two phases on and wait forever). None
    too when the pending count grows without bound round a loop, or when the kernel may
    end with a copy not waited for (a bulk copy must not land after its block exits)."""

    State = tuple[int, bool, bool] | None  # groups pending, a wait since the last sync,
    # copies since the last commit
    ring = 1

    def step(inst: ins.Instruction, state: State) -> State:
        nonlocal ring
        if state is None:
            return None
        pending, waited, open_ = state
        if isinstance(inst, ins.CopyAsync):
            if producer:
                if not open_:
                    ring = max(ring, pending + 1)
                return (pending, False, True) if pending < _MAX_RING else None
            return None if waited else (pending, waited, True)
        if isinstance(inst, ins.CopyAsyncCommit):
            ring = max(ring, pending + 1)
            return (pending + 1, waited, False) if pending < _MAX_RING else None
        if isinstance(inst, ins.CopyAsyncWait):
            return min(pending, inst.n), True, open_
        if isinstance(inst, ins.Sync):
            return pending, False, open_
        return state

    def join(a: State, b: State) -> State:
        return None if a is None or b is None else \
            (max(a[0], b[0]), a[1] or b[1], a[2] or b[2])

    end = dataflow.walk(program.body, (0, False, False), step, join)
    return ring if end is not None and end[0] == 0 and not end[2] else None
