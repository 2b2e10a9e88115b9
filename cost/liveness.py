"""Live bytes per memory level, step by step through one block's program: the memory a
level must hold (the napkin's M_l is the widest column).

    from tilevm.cost.liveness import analyze_liveness
    live = analyze_liveness(program, {"M": 512, "N": 512, "K": 512})
    live.peak["shared"], live.registers_per_thread, live.steps[3].live["register"]

Steps are the program's instructions in program order with loops and branches
flattened: a loop's body appears once, and both sides of an `if` appear, in order (the
indexing of `backend.analysis.shared_memory.live_ranges`). A loop is a span of steps
(`LoopSpan`); what is live across its iterations is live over the whole span. Bytes are
per block.

- shared: an `alloc_shared` tensor over the live range the shared-memory plan uses
  (`live_ranges`: from its allocation to its `free_shared` and the barrier after its last
  access, or to the end; a whole loop where it lives across iterations), its size that
  of its layout (the planner's default layout where it has none). The plan may pad
  between tensors, so its `total_bytes` is at least this peak.
- register: a register tile from the instruction that defines it to its last use;
  a tile used inside a loop it was not defined in is live over the whole loop (the next
  iteration reads it again), and a tile defined in a loop and used after it is live over
  the whole loop too (it crosses the back edge). Two tiles share registers: a `view` and
  its source (a view moves nothing), and a tile whose last use is an `assign` into
  another, with that other (the loop-carried rebinding `acc = dot(a, b, acc)`: the
  compiler keeps both in one set of registers). A set of tiles sharing registers counts
  once, over the union of their ranges, with the bytes of its largest tile. Bytes are
  elements x bits / 8; per thread, over the body's threads (`registers_per_thread`, in
  32-bit registers: the tiles' data only, a lower bound on what ptxas allocates).
- global: the global views live (definition to last use, the same loop rule), each
  counting the bytes of its whole extent (its shape, evaluated over the scalar
  arguments at block 0): the data a step can reach, not what it moves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tilevm.backend.analysis.shared_memory import default_shared_layout, live_ranges
from tilevm.ir.errors import VMError
from tilevm.ir.evaluate import evaluate
from tilevm.ir.expr import Expr, Var
from tilevm.ir.instructions import Assign, Instruction, View
from tilevm.ir.stmt import AssignVar, For, If, Let, Program, Seq
from tilevm.ir.types import MemorySpace, Tensor

__all__ = ["LEVELS", "Liveness", "LoopSpan", "Step", "TensorLife", "analyze_liveness",
           "tensor_bytes"]

LEVELS = ("global", "shared", "register")


@dataclass(frozen=True)
class LoopSpan:
    """A `for` loop: the steps `first..last` of its body (inclusive; `last < first`
    for an empty body), its nesting `depth` (0: outermost), its variable and its trip
    count at block 0 (None where the bounds cannot be evaluated before the run);
    `block_dependent`: the bounds read the block index, so other blocks may run a
    different count."""

    loop: For
    first: int
    last: int
    depth: int
    trips: int | None
    block_dependent: bool

    def contains(self, step: int) -> bool:
        return self.first <= step <= self.last


@dataclass(frozen=True)
class TensorLife:
    """One tensor: its memory `level`, `bytes` (per block), the steps `start..end` it is
    live (its own range), and `storage`: the name of the tensor whose memory it shares
    (its own name if none)."""

    name: str
    level: str
    bytes: int
    start: int
    end: int
    storage: str


@dataclass(frozen=True)
class Step:
    """One instruction (`index` in program order): a short `label`, the loops around it
    (indices into `Liveness.loops`, outermost first), and the bytes live per level."""

    index: int
    label: str
    instruction: Instruction
    loops: tuple[int, ...]
    live: Mapping[str, int]


@dataclass(frozen=True)
class Liveness:
    """The steps of one block's program with their live bytes (module docstring);
    `peak` per level and `peak_step` the first step that reaches it; `threads`: the
    body's threads, over which register tiles are spread."""

    steps: tuple[Step, ...]
    loops: tuple[LoopSpan, ...]
    tensors: Mapping[str, TensorLife]
    peak: Mapping[str, int]
    peak_step: Mapping[str, int]
    threads: int

    @property
    def register_bytes_per_thread(self) -> int:
        return -(-self.peak["register"] // self.threads) if self.threads else 0

    @property
    def registers_per_thread(self) -> int:
        """The peak register tiles' 32-bit registers per thread (data only)."""
        return -(-self.register_bytes_per_thread // 4)


def tensor_bytes(tensor: Tensor) -> int:
    """A static-shape tile's bytes: elements x bits / 8, rounded up."""
    return -(-tensor.type.num_elements * tensor.dtype.bits // 8)


def analyze_liveness(program: Program, scalars: Mapping[str, int | float]) -> Liveness:
    """The live bytes per level at every step of the specialized `program`, the scalar
    arguments `scalars` (by name) sizing its global views."""
    if not isinstance(program, Program):
        raise TypeError(f"analyze_liveness takes a specialized Program, got "
                        f"{type(program).__name__} (call the kernel's .specialize(...))")
    walk = _Walk(program, scalars)
    walk.seq(program.body, ())
    count = len(walk.instructions)
    lives = _shared_lives(program, count) + walk.tile_lives()
    tensors = {life.name: life for life in lives}
    owners = [life for life in lives if life.name == life.storage]
    extents = {life.name: _storage_extent(life, lives) for life in owners}
    steps = []
    for index, (inst, loops) in enumerate(walk.instructions):
        live = dict.fromkeys(LEVELS, 0)
        for life in owners:
            start, end, size = extents[life.name]
            if start <= index <= end:
                live[life.level] += size
        steps.append(Step(index, _label(inst), inst, loops, live))
    peak = {level: max((s.live[level] for s in steps), default=0) for level in LEVELS}
    peak_step = {level: next((s.index for s in steps if s.live[level] == peak[level]), 0)
                 for level in LEVELS}
    return Liveness(tuple(steps), tuple(walk.loops), tensors, peak, peak_step,
                    program.num_threads)


def _storage_extent(owner: TensorLife, lives: list[TensorLife]) -> tuple[int, int, int]:
    """The union of the ranges of the tensors sharing `owner`'s memory, and the bytes
    of the largest."""
    members = [life for life in lives if life.storage == owner.name]
    return (min(m.start for m in members), max(m.end for m in members),
            max(m.bytes for m in members))


def _label(inst: Instruction) -> str:
    """The opname and the tensor the instruction defines or writes (else reads)."""
    target = inst.output or getattr(inst, "dst", None) or next(iter(inst.input_tensors()),
                                                                None)
    return f"{inst.opname} %{target.name}" if isinstance(target, Tensor) else inst.opname


def _shared_lives(program: Program, count: int) -> list[TensorLife]:
    lives = []
    for name, (start, end, tensor) in live_ranges(program).items():
        layout = tensor.layout if tensor.layout is not None else default_shared_layout(tensor)
        lives.append(TensorLife(name, "shared", layout.size_bytes, start,
                                min(end, count - 1), name))
    return lives


class _BlockZero:
    """Block 0's index for `evaluate`, noting whether the expression read it."""

    def __init__(self) -> None:
        self.read = False

    def __getitem__(self, axis: int) -> int:
        self.read = True
        return 0


class _Walk:
    """The program in step order: the instructions with their loops, the loops' spans,
    and per register tile and global view its defining step and uses; scalar variables
    evaluated at block 0 with every loop at its first iteration (for trip counts and
    view sizes)."""

    def __init__(self, program: Program, scalars: Mapping[str, int | float]) -> None:
        self.program = program
        self.env: dict[str, int | float | None] = {}  # None: not known before the run
        self.block_dependent: set[str] = set()
        for p in program.params:
            if isinstance(p, Var):
                self.env[p.name] = scalars.get(p.name)
        self.instructions: list[tuple[Instruction, tuple[int, ...]]] = []
        self.loops: list[LoopSpan] = []
        self.defined: dict[str, tuple[int, Tensor]] = {}
        self.uses: dict[str, list[int]] = {}
        self.assigns: list[tuple[int, str, str]] = []  # step, src, dst
        self.views: list[tuple[str, str]] = []  # out, src

    def value(self, e: Expr) -> tuple[int | float | None, bool]:
        """`e` at block 0 (None if unknown) and whether it reads the block index."""
        block = _BlockZero()
        through_variables = False

        def lookup(var: Var) -> int | float:
            nonlocal through_variables
            through_variables |= var.name in self.block_dependent
            found = self.env.get(var.name)
            if found is None:
                raise KeyError(var.name)
            return found

        try:
            value = evaluate(e, lookup, block)  # type: ignore[arg-type]
        except (KeyError, VMError):
            value = None
        return value, block.read or through_variables

    def bind(self, var: Var, e: Expr) -> None:
        value, reads_block = self.value(e)
        if var.name not in self.env:  # a variable keeps its first value
            self.env[var.name] = value
        if reads_block:
            self.block_dependent.add(var.name)

    def seq(self, seq: Seq, loops: tuple[int, ...]) -> None:
        for stmt in seq.body:
            if isinstance(stmt, Instruction):
                self.instruction(stmt, loops)
            elif isinstance(stmt, Seq):
                self.seq(stmt, loops)
            elif isinstance(stmt, (Let, AssignVar)):
                self.bind(stmt.var, stmt.value)
            elif isinstance(stmt, If):
                self.seq(stmt.then_body, loops)
                if stmt.else_body is not None:
                    self.seq(stmt.else_body, loops)
            elif isinstance(stmt, For):
                self.loop(stmt, loops)

    def loop(self, stmt: For, loops: tuple[int, ...]) -> None:
        bounds = [self.value(e) for e in (stmt.start, stmt.stop, stmt.step)]
        start, stop, step = (v for v, _ in bounds)
        trips = None
        if all(isinstance(v, int) for v in (start, stop, step)) and step:
            trips = len(range(start, stop, step))  # type: ignore[arg-type]
        self.bind(stmt.var, stmt.start)
        index = len(self.loops)
        self.loops.append(None)  # type: ignore[arg-type]  # placed once its span is known
        first = len(self.instructions)
        self.seq(stmt.body, (*loops, index))
        self.loops[index] = LoopSpan(stmt, first, len(self.instructions) - 1, len(loops),
                                     trips, any(b for _, b in bounds))

    def instruction(self, inst: Instruction, loops: tuple[int, ...]) -> None:
        step = len(self.instructions)
        self.instructions.append((inst, loops))
        for tensor in inst.input_tensors():
            self.uses.setdefault(tensor.name, []).append(step)
        out = inst.output
        if out is not None and out.space is not MemorySpace.SHARED:
            self.defined.setdefault(out.name, (step, out))
        if isinstance(inst, Assign):
            self.assigns.append((step, inst.src.name, inst.dst.name))
        elif isinstance(inst, View):
            self.views.append((inst.out.name, inst.src.name))

    def tile_lives(self) -> list[TensorLife]:
        """Register tiles and global views with their ranges and shared storage."""
        storage = {name: name for name in self.defined}

        def root(name: str) -> str:
            while storage[name] != name:
                name = storage[name]
            return name

        for out, src in self.views:
            if out in storage and src in storage:
                storage[root(out)] = root(src)
        for step, src, dst in self.assigns:
            if src in storage and dst in storage and max(self.uses[src]) == step:
                storage[root(src)] = root(dst)
        lives = []
        for name, (step, tensor) in self.defined.items():
            start, end = self.extend(step, self.uses.get(name, []))
            if tensor.space is MemorySpace.GLOBAL:
                lives.append(TensorLife(name, "global", self.view_bytes(tensor), start, end,
                                        name))
            else:
                lives.append(TensorLife(name, "register", tensor_bytes(tensor), start, end,
                                        root(name)))
        return lives

    def extend(self, defined: int, uses: list[int]) -> tuple[int, int]:
        """The range from the definition to the last use, with the loop rule."""
        start, end = defined, max([defined, *uses])
        changed = True
        while changed:
            changed = False
            for loop in self.loops:
                inside = loop.contains(defined)
                reaches = any(loop.contains(u) for u in uses) and not inside
                leaves = inside and end > loop.last
                if (reaches or leaves) and (loop.first < start or loop.last > end):
                    start, end = min(start, loop.first), max(end, loop.last)
                    changed = True
        return start, end

    def view_bytes(self, tensor: Tensor) -> int:
        elements = 1
        for extent in tensor.type.shape:
            n = extent if isinstance(extent, int) else self.value(extent)[0]
            if not isinstance(n, int):
                raise ValueError(f"kernel {self.program.name}: the size {extent} of the "
                                 f"global view %{tensor.name} cannot be evaluated (its "
                                 "scalar arguments are missing or known only at run time)")
            elements *= max(n, 0)
        return -(-elements * tensor.dtype.bits // 8)
