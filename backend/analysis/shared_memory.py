"""The shared-memory plan: a byte offset for every shared tensor of a program in the
block's one dynamic shared-memory buffer.

`shared_plan(program)`, for a program whose shared tensors have layouts (after pass
`plan_shared_memory`), gives each `alloc_shared` tensor a byte offset such that

- the offset is a multiple of the tensor's alignment, `max(16, swizzle.period)` (16 bytes
  for 16-byte vector accesses and `cp.async`; the swizzle period so that XOR-swizzling
  the buffer offset `offset + b` equals `offset + swizzle(b)`, as `SharedLayout` means);
- `base_align`, the alignment the buffer's start is declared with, is the largest of
  those but at most `MAX_BASE_ALIGN` (1024 bytes), what the GPU gives the start. Beyond
  that nothing needs it: offsets and swizzles are computed from the buffer's start, and
  only the hardware's own swizzles (TMA copies and wgmma operands, at most the 128-byte
  swizzle, period 1024) read absolute addresses. Declaring more would be false: LLVM
  takes the declared alignment as zero bits of the address, and the GPU may place a
  buffer declared `.align 2048` at 1024 mod 2048, where wgmma descriptors built
  without bit 10 would read their operands 1024 bytes off;
- tensors that may be live at the same time never share a byte;
- `total_bytes` (a multiple of 16) covers every tensor: it is the size of the dynamic
  shared memory a launch must ask for (`CompiledKernel.shared_bytes`);
- a program with an instruction that defines a scalar (`atomic_add`, `globaltimer`) gets
  `scratch_offset`: 16 bytes past every tensor,
  through which an instruction hands one thread's value to the block (a static shared
  variable instead would sit before the dynamic buffer and push its aligned start up
  to `base_align` bytes).

Layout of a tensor created without one (`default_shared_layout`, which the pass
`plan_shared_memory` writes into the program): `swizzled(shape, dtype)` when the tile is 2-D with
rows of at least 16 bytes (the swizzle of `ldmatrix_swizzle`: 16-byte chunks move within
their row, so 16-byte accesses and ldmatrix phases stay conflict-free; rows that are not
a whole number of 16-byte chunks stay unswizzled), else `row_major(shape, dtype)`.
Layouts change no result: every access goes through the layout.

The plan is a pure function of the program, so it is not stored in the IR: the passes,
codegen and the pipeline call `shared_plan` on the program they hold, which computes it
once per program object (`memo.per_program`).

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
  reused;
- a tensor another block of the cluster reads (`load_shared(..., peer=)`) is live to the
  end of the program, freed or not: the other blocks may read it until they are done.
Placement: linear scan in order of live-range start, first fit: the lowest aligned
offset that overlaps no tensor whose live range intersects this one.
"""


from __future__ import annotations

from dataclasses import dataclass

from tilevm.backend.analysis.memo import per_program
from tilevm.backend.analysis.tma import tma_barriers
from tilevm.ir import instructions as ins
from tilevm.ir.stmt import For, If, Program, Seq
from tilevm.ir.transform import instructions
from tilevm.ir.types import Tensor
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


def live_ranges(program: Program) -> dict[str, tuple[int, int, Tensor]]:
    """Per allocated tensor: its live range (start, end) in program order (instruction
    indices, the rule of the module docstring; an unfreed tensor ends at the number of
    instructions), and itself. The cost model's liveness reads it too."""
    counter = 0
    # name -> [alloc index, free index or None, tensor, enclosing loops ([first, last],
    #          outermost first), (index, enclosing statements) of the last access]
    allocs: dict[str, list] = {}
    syncs: list[tuple[int, tuple[int, ...]]] = []
    peer_read: set[str] = set()

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
                    if isinstance(stmt, ins.LoadShared) and stmt.peer is not None:
                        peer_read.add(stmt.src.name)
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
        if name in peer_read:  # other blocks read it until the program's end
            end = None
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


@per_program
def shared_plan(program: Program) -> SharedPlan:
    """Offsets of every `alloc_shared` tensor of a program whose shared tensors all have
    layouts (the output of `plan_shared_memory`); computed once per program object."""
    ranges = live_ranges(program)
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
    if any(i.defines is not None for i in instructions(program.body)):  # a hand-over
        scratch, total = total, total + MIN_ALIGN
    barrier_offset, barriers = None, tma_barriers(program)
    if barriers:
        barrier_offset = total
        total += -(-8 * barriers // MIN_ALIGN) * MIN_ALIGN
    base_align = min(max((a.align for a in placed), default=MIN_ALIGN), MAX_BASE_ALIGN)
    return SharedPlan({a.name: a for a in placed}, total, base_align, scratch,
                      barrier_offset, barriers)
