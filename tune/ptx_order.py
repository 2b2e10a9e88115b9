"""Legal reorderings of a PTX function's instructions: the dependency graph of each run
of straight-line code, and random topological orders of it.

    order = PtxOrder.parse(text)
    order.permuted(random.Random(seed))   # PTX text, one legal order per run
    order.moved(orders)                   # {run: order} of the runs that move
    order.reordered(moved)                # the text in those orders, checked legal

ptxas does not normalize instruction order, so the order of the PTX a compiler emits is a
knob of the final code (issue: SIP's level 2). A reordering is legal when every thread
computes the same values and issues the same memory operations in every order that
matters:

- Runs. The body is cut into runs of instructions between hard fences, each kept in
  place: labels, branches, `ret`/`exit`, barriers (`bar`, `barrier`), fences and
  `membar`, memory accesses with an ordering qualifier (`.acquire`, `.release`,
  `.acq_rel`, `.sc`, `.relaxed`, `.volatile`, `.mmio`: a semaphore's wait or post),
  the asynchronous machinery (`cp.async.commit_group`/`wait_*`, `mbarrier.*`,
  `wgmma.fence`/`commit_group`/`wait_group`, `griddepcontrol.*`), calls, inline
  `{ ... }` blocks (their registers are their own), directives, and any opcode not known
  here (a reordering is only as sound as what is understood).
- Registers. An instruction defines the registers of its first operand (both of
  `setp`'s `%p|%q`, all of a vector `{%r1, %r2}`) unless it is one of the opcodes that
  write no register (stores, reductions without result, prefetches, `cp.async`) or
  write memory through its first operand. Every other register it names, and its guard
  predicate `@%p`, it reads. An instruction stays after the definitions it reads (RAW),
  after the reads of the registers it defines (WAR) and after the earlier definitions
  of them (WAW).
- Memory. Two memory operations stay in order unless both only read: stores,
  reductions, atomics, `cp.async` copies (which read global and write shared) and
  `stmatrix` write; no alias analysis is attempted.

Everything else may move: a random order picks, at each step, one of the instructions
whose predecessors are all placed (uniformly, so every topological order can come out).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["PtxOrder", "Instruction", "Run", "PtxOrderError", "ptx_digest"]


class PtxOrderError(ValueError):
    """The text is not PTX this module can read (no function body)."""


_REGISTER = re.compile(r"%[A-Za-z_][\w$]*")
_GUARD = re.compile(r"^@!?(%[\w$]+)\s+")
# opcodes (their first dotted part, or the whole prefix) after which order matters for all
_FENCES = ("bar", "barrier", "fence", "membar", "mbarrier", "griddepcontrol", "bra", "brx",
           "ret", "exit", "call", "trap", "brkpt", "setmaxnreg", "elect", "nanosleep")
_FENCE_PREFIXES = ("cp.async.commit_group", "cp.async.wait", "cp.async.bulk.commit_group",
                   "cp.async.bulk.wait_group", "wgmma.fence", "wgmma.commit_group",
                   "wgmma.wait_group", "cp.async.mbarrier")
# memory-model qualifiers: an access that orders others (an acquire load, a release
# store, a volatile or scoped access) is a fence itself
_ORDERING = {"acquire", "release", "acq_rel", "sc", "relaxed", "volatile", "mmio"}
# opcodes that can move, by how they touch memory
_PURE = {"add", "sub", "mul", "mad", "mul24", "mad24", "sad", "div", "rem", "abs", "neg",
         "min", "max", "popc", "clz", "bfind", "fns", "brev", "bfe", "bfi", "dp4a", "dp2a",
         "and", "or", "xor", "not", "cnot", "lop3", "shf", "shl", "shr", "fma", "rcp",
         "sqrt", "rsqrt", "sin", "cos", "lg2", "ex2", "tanh", "copysign", "testp", "set",
         "setp", "selp", "slct", "mov", "cvt", "cvta", "prmt", "isspacep", "mapa",
         "shfl", "vote", "activemask", "match", "redux", "mma", "ldmatrix", "movmatrix",
         "cvt.pack", "subc", "addc", "madc", "mul.hi", "bmsk", "szext", "fma.rn"}
_LOADS = {"ld", "ldu", "ldmatrix", "prefetch", "prefetchu"}
_WRITES = {"st", "red", "atom", "cp", "stmatrix", "cp.reduce", "st.async", "red.async"}
_NO_DEFINITION = {"st", "red", "prefetch", "prefetchu", "cp", "stmatrix", "st.async",
                  "red.async"}


@dataclass
class Instruction:
    """One instruction: its text (a line, or a `{ ... }` block), the registers it
    defines and reads, and how it touches memory ("", "read" or "write")."""

    text: str
    defines: frozenset[str] = frozenset()
    reads: frozenset[str] = frozenset()
    memory: str = ""


@dataclass
class Run:
    """Straight-line instructions that may be reordered among themselves, and the
    edges (before, after) by index that any order must keep."""

    instructions: list[Instruction]
    edges: set[tuple[int, int]] = field(default_factory=set)

    def window(self, order: Sequence[int], position: int) -> range:
        """Where the instruction at `position` of `order` may go: the insertion indices
        into the order without it that keep it after its predecessors and before its
        successors."""
        moving = order[position]
        rest = [i for i in order if i != moving]
        at = {i: k for k, i in enumerate(rest)}
        before = [at[a] for a, b in self.edges if b == moving]
        after = [at[b] for a, b in self.edges if a == moving]
        return range(max(before, default=-1) + 1, min(after, default=len(rest)) + 1)

    def order(self, rng: random.Random) -> list[int]:
        """A uniformly random pick among the ready instructions at each step."""
        n = len(self.instructions)
        waiting = [0] * n
        after: list[list[int]] = [[] for _ in range(n)]
        for a, b in self.edges:
            waiting[b] += 1
            after[a].append(b)
        ready = [i for i in range(n) if not waiting[i]]
        order = []
        while ready:
            i = ready.pop(rng.randrange(len(ready)))
            order.append(i)
            for j in after[i]:
                waiting[j] -= 1
                if not waiting[j]:
                    ready.append(j)
        return order


@dataclass
class PtxOrder:
    """A PTX text as lines kept in place (`pieces`: str) and runs that may move."""

    pieces: list[str | Run]

    @classmethod
    def parse(cls, text: str) -> PtxOrder:
        if not re.search(r"\.(entry|func)\b", text):
            raise PtxOrderError("no .entry or .func in the text: not a PTX kernel")
        pieces: list[str | Run] = []
        current: list[Instruction] = []
        depth = 0
        block: list[str] = []
        in_body = False

        def close() -> None:
            if current:
                pieces.append(_run(list(current)))
                current.clear()

        for line in text.splitlines(keepends=True):
            stripped = line.strip()
            if block:  # inside a multi-line { ... } block: kept whole, in place
                block.append(line)
                if stripped.startswith("}"):
                    pieces.append("".join(block))
                    block = []
                continue
            if not in_body:
                pieces.append(line)
                if stripped == "{":
                    in_body, depth = True, 1
                continue
            if stripped == "}" and depth == 1:
                close()
                pieces.append(line)
                in_body = False
                continue
            if stripped == "{":
                close()
                block = [line]
                continue
            instruction = _instruction(stripped) if stripped else None
            if instruction is None:  # a fence, a label, a directive, a comment, a blank:
                close()  # it stays where it is, between runs
                pieces.append(line)
            else:
                instruction.text = line
                current.append(instruction)
        close()
        return cls(pieces)

    def permuted(self, rng: random.Random) -> str:
        """The text with each run in a random legal order."""
        return self.text([run.order(rng) for run in self.runs])

    def text(self, orders: Sequence[Sequence[int]] | None = None) -> str:
        """The text with the runs in `orders` (one order per run, by index; None: as
        parsed)."""
        runs = self.runs
        if orders is None:
            orders = [range(len(run.instructions)) for run in runs]
        if len(orders) != len(runs):
            raise ValueError(f"{len(orders)} orders for {len(runs)} runs")
        placed = dict(zip(map(id, runs), orders, strict=True))
        out = []
        for piece in self.pieces:
            if isinstance(piece, str):
                out.append(piece)
            else:
                out.extend(piece.instructions[i].text for i in placed[id(piece)])
        return "".join(out)

    @property
    def runs(self) -> list[Run]:
        return [p for p in self.pieces if isinstance(p, Run)]

    def moved(self, orders: Sequence[Sequence[int]]) -> dict[str, list[int]]:
        """`orders` (one per run) as the runs they move: `{run index: its order}` for the
        runs not in their parsed order (a compact form a tuning table can hold)."""
        runs = self.runs
        if len(orders) != len(runs):
            raise ValueError(f"{len(orders)} orders for {len(runs)} runs")
        return {str(i): list(o) for i, o in enumerate(orders) if list(o) != list(range(len(o)))}

    def reordered(self, moved: dict[str, Sequence[int]]) -> str:
        """The text with the runs `moved` names in their orders (`moved`'s form), each
        checked to be a legal order of its run: a run index out of range, an order that
        is not a permutation of its run or that breaks one of its edges is a
        `PtxOrderError` (an order from elsewhere, a tuning table, is checked, not
        trusted)."""
        runs = self.runs
        orders: list[Sequence[int]] = [range(len(run.instructions)) for run in runs]
        for key, order in moved.items():
            index = int(key) if str(key).isdigit() else -1
            if not 0 <= index < len(runs):
                raise PtxOrderError(f"run {key!r} of an order: the text has {len(runs)} runs")
            run = runs[index]
            if sorted(order) != list(range(len(run.instructions))):
                raise PtxOrderError(f"run {index}: {list(order)[:8]}... is not an order of "
                                    f"its {len(run.instructions)} instructions")
            at = {i: k for k, i in enumerate(order)}
            broken = next(((a, b) for a, b in run.edges if at[a] > at[b]), None)
            if broken is not None:
                raise PtxOrderError(f"run {index}: instruction {broken[1]} placed before "
                                    f"{broken[0]}, on which it depends")
            orders[index] = order
        return self.text(orders)


def ptx_digest(text: str) -> str:
    """A short name of a PTX text (what an order was found on; sha256, 16 hex digits)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _opcode(body: str) -> str:
    return body.split(None, 1)[0].rstrip(";") if body else ""


def _instruction(line: str) -> Instruction | None:
    """The movable instruction of one line, or None for a line that stays in place."""
    if line.startswith(("//", ".", "$", "{", "}")) or line.endswith(":") or ";" not in line:
        return None
    if line.count(";") != 1 or not line.rstrip().endswith(";"):
        return None  # several statements on a line (inline blocks): kept in place
    guard = _GUARD.match(line)
    body = line[guard.end():] if guard else line
    opcode = _opcode(body)
    parts = opcode.split(".")
    if parts[0] in _FENCES or opcode.startswith(_FENCE_PREFIXES) or \
            _ORDERING.intersection(parts[1:]):
        return None
    if parts[0] in _LOADS:
        memory = "read"
    elif parts[0] in _WRITES or opcode.startswith("cp.async"):
        memory = "write"
    elif parts[0] in _PURE:
        memory = ""
    else:
        return None  # not known here: a fence
    operands = body[len(opcode):].strip().rstrip(";")
    first, rest = _split_first(operands)
    defines: set[str] = set()
    reads = set(_REGISTER.findall(rest))
    if parts[0] in _NO_DEFINITION or first.startswith("["):
        reads |= set(_REGISTER.findall(first))
    else:
        defines = set(_REGISTER.findall(first))
    if guard:
        reads.add(guard.group(1))
    if parts[0] == "mma" or parts[0] == "wgmma":  # accumulators: read as well
        reads |= defines
    return Instruction("", frozenset(defines), frozenset(reads), memory)


def _split_first(operands: str) -> tuple[str, str]:
    """The first operand (a register, `%p|%q`, a `{...}` vector or `[...]` address) and
    the rest."""
    depth = 0
    for i, c in enumerate(operands):
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        elif c == "," and depth == 0:
            return operands[:i], operands[i + 1:]
    return operands, ""


def _run(instructions: list[Instruction]) -> Run:
    run = Run(instructions)
    last_definition: dict[str, int] = {}
    reads_since: dict[str, list[int]] = {}
    last_write = -1
    reads_since_write: list[int] = []
    for j, inst in enumerate(instructions):
        for r in inst.reads:
            if r in last_definition:
                run.edges.add((last_definition[r], j))  # RAW
        for r in inst.defines:
            for i in reads_since.get(r, []):
                if i != j:
                    run.edges.add((i, j))  # WAR
            if r in last_definition:
                run.edges.add((last_definition[r], j))  # WAW
        for r in inst.reads:
            reads_since.setdefault(r, []).append(j)
        for r in inst.defines:
            last_definition[r] = j
            reads_since[r] = []
        if inst.memory == "write":
            if last_write >= 0:
                run.edges.add((last_write, j))
            run.edges.update((i, j) for i in reads_since_write)
            last_write, reads_since_write = j, []
        elif inst.memory == "read":
            if last_write >= 0:
                run.edges.add((last_write, j))
            reads_since_write.append(j)
    return run
