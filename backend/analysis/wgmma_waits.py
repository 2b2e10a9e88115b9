"""Where a program's in-flight wgmma groups must be waited for, and how many may stay in
flight there: an analysis over the structured program, run once before code generation.

Expects: a program after `plan_shared_memory`'s inputs are fixed (the plan gives each
shared tensor its byte range), whose wgmma `dot`s (a `dot` with a shared b operand, and
maybe a shared a) each form one commit group, in program order. Race-free programs only:
a shared tile a `dot` reads is written afterwards only behind a `sync` (the `Dot`
contract).

Guarantees (`WgmmaWaits`, per instruction, by identity):
- `keep[inst]`: before `inst`, wait until at most `keep` groups are in flight
  (`wgmma.wait_group keep`); absent: no wait. A group the tensor cores may still be
  reading is retired before any write of its B tile's bytes: before a `copy_async` or
  `store_shared` into bytes it reads (this thread's groups), and before a `sync` after
  which, before the next `sync`, some thread may write them (every thread's groups: the
  writer may be another warpgroup). Every other instruction that writes or orders shared
  memory, or ends the kernel, retires every group (`keep` 0).
- `settled[inst]`: no group can be in flight at `inst` (after its wait): its operands'
  registers may be read as they are. (Where the lowering waits to read an accumulator,
  this analysis does not follow: groups are assumed in flight until a wait it placed.)

How: a forward dataflow of the possible *pending lists* (the shared tiles each group in
flight reads, oldest first; at most `_DEPTH` named, older ones a wildcard that overlaps
every tile), joined over branches and iterated to a fixed point over loops; and a
backward one of the tiles written before the next `sync`. `wait_group n` retires all but the `n`
newest groups (groups complete in order), so `keep` is, over the possible lists, the
fewest newest groups that read none of the bytes about to be written.

Why: a `sync` that retired every group (the rule before this analysis) left the tensor
cores idle from the end of k-tile t's wgmmas until k-tile t + 1's were issued, although
the copies behind the `sync` write another stage's buffer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tilevm.backend.analysis.memo import per_program
from tilevm.backend.analysis.shared_memory import shared_plan
from tilevm.ir import dataflow
from tilevm.ir import instructions as ins
from tilevm.ir.stmt import Program, Seq
from tilevm.ir.transform import instructions
from tilevm.ir.types import MemorySpace

_DEPTH = 4  # pending groups tracked by name (wgmma.wait_group takes 0..7)
_UNKNOWN = ""  # a tile not known by name: overlaps every tile
_ANY = (_UNKNOWN,)  # a group whose tiles are unknown
# Groups left in flight once a `dot` has committed its own: the older ones are retired
# there. Each group in flight pins the registers of its A operand (and ptxas, where the
# code after a `dot` needs registers that the groups in flight still hold, serializes
# every wgmma of the kernel, C7513); one keeps the tensor cores busy, as the next `dot`
# queues behind it.
IN_FLIGHT_AFTER_DOT = 1

# May run while groups are in flight: they neither write nor order shared memory.
# (Reads of in-flight accumulator registers are the lowering's concern: `InFlight.read`.)
OVERLAPPING = (ins.Dot, ins.Assign, ins.LoadGlobal, ins.LoadShared, ins.GlobalView,
               ins.Cast, ins.Elementwise, ins.Where, ins.View, ins.Full, ins.Arange, ins.Assume,
               ins.AnnotateLayout, ins.CopyAsyncCommit, ins.CopyAsyncWait,
               ins.AllocShared, ins.FreeShared, ins.LaunchDependents, ins.WaitPrerequisites)

Pending = tuple[tuple[str, ...], ...]  # per group in flight (oldest first), its tiles


def is_wgmma(inst: ins.Instruction) -> bool:
    """A `dot` the tensor cores run asynchronously (b read from shared memory)."""
    return isinstance(inst, ins.Dot) and inst.b.space is MemorySpace.SHARED


def uses_wgmma(program: Program) -> bool:
    """Whether a `dot` of the program reads its b operand from shared memory."""
    return any(is_wgmma(i) for i in instructions(program.body))


def shared_written(inst: ins.Instruction) -> str | None:
    """The shared tensor `inst` writes by name (copies and stores), else None."""
    if isinstance(inst, (ins.CopyAsync, ins.StoreShared)):
        return inst.dst.name
    return None


@dataclass(frozen=True)
class WgmmaWaits:
    keep: dict[int, int]
    keep_after: dict[int, int]  # after a wgmma `dot` (its group committed)
    settled: dict[int, bool]
    keep_at_end: int | None  # before the kernel returns (None: nothing can be in flight)


def analyze(body: Seq, ranges: dict[str, tuple[int, int]]) -> WgmmaWaits:
    """The waits of the program `body`. `ranges`: each shared tensor's byte range
    `[start, end)` (a tensor without one overlaps everything)."""
    return _Analysis(ranges).run(body)


@per_program
def program_waits(program: Program) -> WgmmaWaits:
    """`analyze` of the program's body over its shared plan's byte ranges (once per
    program object)."""
    ranges = {a.name: (a.offset, a.offset + a.size)
              for a in shared_plan(program).allocations.values()}
    return analyze(program.body, ranges)


class _Analysis:
    def __init__(self, ranges: dict[str, tuple[int, int]]) -> None:
        self.ranges = ranges
        self.keep: dict[int, int] = {}
        self.keep_after: dict[int, int] = {}
        self.settled: dict[int, bool] = {}
        self.written_after: dict[int, frozenset[str]] = {}  # per sync

    def run(self, body: Seq) -> WgmmaWaits:
        union = frozenset.union
        dataflow.walk(body, frozenset(), self._written_before_sync, union, backward=True)
        end = dataflow.walk(body, frozenset({()}), self._instruction, union)
        keep_end = None if end == {()} else 0
        return WgmmaWaits(self.keep, self.keep_after, self.settled, keep_end)

    def _written_before_sync(self, inst: ins.Instruction,
                             after: frozenset[str]) -> frozenset[str]:
        """Backward: the tiles written from `inst` on until the next `sync` on some path,
        given those from after it; records each sync's (`written_after`)."""
        if isinstance(inst, ins.Sync):
            self.written_after[id(inst)] = self.written_after.get(id(inst), frozenset()) \
                | after
            return frozenset()
        name = shared_written(inst)
        return after if name is None else after | {name}

    def _instruction(self, inst: ins.Instruction,
                     state: frozenset[Pending]) -> frozenset[Pending]:
        """Forward: the pending lists after `inst`; records its wait."""
        key = id(inst)  # (loops are walked until their states settle: the last walk counts)
        if isinstance(inst, ins.Sync):
            keep = self._keep(state, self.written_after.get(key, frozenset()))
        elif shared_written(inst) is not None:
            keep = self._keep(state, {shared_written(inst)})
        elif isinstance(inst, OVERLAPPING):
            keep = None
        else:
            keep = 0
        if keep is not None and keep < max(len(p) for p in state):
            self.keep[key] = keep
            state = frozenset(p[len(p) - keep:] if keep else () for p in state)
        else:
            self.keep.pop(key, None)
        self.settled[key] = state == {()}
        if is_wgmma(inst):
            tiles = tuple(t.name for t in (inst.a, inst.b) if t.space is MemorySpace.SHARED)
            state = frozenset(_push(p, tiles) for p in state)
            if max(len(p) for p in state) > IN_FLIGHT_AFTER_DOT:
                self.keep_after[key] = IN_FLIGHT_AFTER_DOT
                state = frozenset(p[-IN_FLIGHT_AFTER_DOT:] for p in state)
            else:
                self.keep_after.pop(key, None)
        return state

    def _keep(self, state: Iterable[Pending], written: Iterable[str]) -> int:
        """How many of the newest groups may stay in flight, over every possible list."""
        written = list(written)
        keep = _DEPTH + 1
        for pending in state:
            for n, tiles in enumerate(reversed(pending)):
                if any(self._overlap(t, w) for t in tiles for w in written):
                    keep = min(keep, n)
                    break
        return keep

    def _overlap(self, a: str, b: str) -> bool:
        ra, rb = self.ranges.get(a), self.ranges.get(b)
        if a == _UNKNOWN or ra is None or rb is None:
            return True
        return ra[0] < rb[1] and rb[0] < ra[1]


def _push(pending: Pending, tiles: tuple[str, ...]) -> Pending:
    """`pending` with a new newest group reading `tiles`; beyond `_DEPTH` named groups the
    oldest become one wildcard group (it overlaps everything, so is never kept)."""
    pending = pending + (tiles,)
    if len(pending) > _DEPTH:
        pending = (_ANY,) + tuple(t for t in pending if t != _ANY)[-_DEPTH:]
    return pending
