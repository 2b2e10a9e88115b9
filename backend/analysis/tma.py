"""Facts of a program's TMA copies (sm_90a) and of its producer warp: which copies go
through the tensor memory accelerator, the tensor maps they need (kernel parameters
after the program's own), the ring of mbarriers their commit groups complete on, and the
"empty"/"full" barriers of the buffers a producer warp fills. backend/llvm/lowering/tma.py
emits what these describe; its docstring tells the protocol.
"""

from __future__ import annotations

from tilevm.backend.analysis.memo import per_program
from tilevm.backend.analysis.signature import TensorMapSpec
from tilevm.ir import dataflow
from tilevm.ir import instructions as ins
from tilevm.ir.stmt import Program
from tilevm.ir.transform import instructions
from tilevm.ir.types import MemorySpace

RELEASE = ins.lowering("release")  # a store's form in the other warps: the tile's release


@per_program
def tensor_maps(program: Program) -> tuple[TensorMapSpec, ...]:
    """The program's tensor-map parameters, in order of first use (one per distinct
    view, dims, box and swizzle of its TMA copies)."""
    found: dict[TensorMapSpec, None] = {}
    for inst in instructions(program.body):
        if is_tma(inst):
            found.setdefault(tensor_map(inst, program.cluster), None)
    return tuple(found)


def tensor_map(inst: ins.CopyAsync, cluster: int) -> TensorMapSpec:
    """The tensor map of a TMA copy: a multicast copy's box is one block's slice of it
    (the outermost dimension, last, divided by the cluster's blocks)."""
    form = inst.lowering
    box = tuple(int(d) for d in str(form["box"]).split(","))
    if inst.multicast:
        box = (*box[:-1], box[-1] // cluster)
    return TensorMapSpec(inst.src.name, tuple(int(d) for d in str(form["dims"]).split(",")),
                         box, int(form["swizzle"]))


def uses_cp_async(program: Program) -> bool:
    """Whether some `copy_async` of the program still goes through `cp.async` groups."""
    return any(isinstance(i, ins.CopyAsync) and not is_tma(i)
               for i in instructions(program.body))


def is_release(inst: ins.Instruction) -> bool:
    """Whether `inst` is a `store_shared` the converting producer runs, left in the
    other warps' body as the release of its tile (`split_producer_warp`)."""
    return isinstance(inst, ins.StoreShared) and inst.lowering == RELEASE


def is_tma(inst: ins.Instruction) -> bool:
    """A `copy_async` that `select_instructions` sent through the tensor memory
    accelerator (form `tma(...)`)."""
    return isinstance(inst, ins.CopyAsync) and inst.lowering is not None \
        and inst.lowering.name == "tma"


@per_program
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
