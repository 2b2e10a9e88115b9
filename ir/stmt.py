"""Statements and programs: structured control flow around instructions.

A program body is a `Seq` of statements: instructions, `For` loops over a scalar
range (with an unroll hint), `If` branches on a scalar condition, and scalar
variables (`Let` declares one with a value, `AssignVar` updates it; loop-carried
scalars are such variables).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilevm.ir.errors import SourceLoc
from tilevm.ir.expr import Expr, Var
from tilevm.ir.instructions import Instruction
from tilevm.ir.types import Pointer

REGISTER_FILE = 65536  # 32-bit registers of an SM (sm_70 to sm_90), all one block's at most
WARPGROUP_WARPS = 4  # the warps of a warpgroup (Hopper's wgmma and setmaxnreg act on one)


@dataclass(frozen=True, kw_only=True)
class Seq:
    body: tuple[Stmt, ...] = ()


@dataclass(frozen=True, kw_only=True)
class For:
    """`for var in range(start, stop, step): body`; `unroll` is a hint (None: the
    compiler decides, 1: never)."""

    var: Var
    start: Expr
    stop: Expr
    step: Expr
    body: Seq
    unroll: int | None = None
    loc: SourceLoc | None = None


@dataclass(frozen=True, kw_only=True)
class If:
    cond: Expr
    then_body: Seq
    else_body: Seq | None = None
    loc: SourceLoc | None = None


@dataclass(frozen=True, kw_only=True)
class Let:
    """Declare the scalar variable `var` with an initial value."""

    var: Var
    value: Expr
    loc: SourceLoc | None = None


@dataclass(frozen=True, kw_only=True)
class AssignVar:
    """Update a scalar variable declared by `Let`."""

    var: Var
    value: Expr
    loc: SourceLoc | None = None


Stmt = Instruction | Seq | For | If | Let | AssignVar


def entry_registers(block_threads: int) -> int:
    """The registers a thread has when a block of `block_threads` starts, with a
    producer that gives some up (`Program.producer_registers`): the most that lets the
    whole block fit the SM's register file, in the units of 8 they are allocated in, at
    most 255. Codegen makes ptxas compile such a kernel to that count (`.maxnreg`); the
    runtime checks it at load (a `setmaxnreg.inc` asking for more than the pool holds
    would wait forever)."""
    return min(255, REGISTER_FILE // block_threads) // 8 * 8


CLUSTER_SIZES = (1, 2, 4, 8)  # blocks a cluster may have (8: the portable most on sm_90)


def cluster_grid_problem(cluster: int, first: object, extent: int) -> str | None:
    """What is wrong with a launch whose grid's first dimension (expression `first`) is
    `extent` blocks, for clusters of `cluster` (None: nothing); the runtime and the
    interpreter refuse such a launch alike."""
    if extent % cluster:
        return (f"runs in clusters of {cluster} blocks along the grid's first dimension, "
                f"but that dimension ({first}) is {extent}, not a multiple of {cluster}")
    return None


def body_registers(num_warps: int, producer_warps: int, producer_registers: int) -> int:
    """The registers a thread of the `num_warps` warps has once the producer's threads
    keep `producer_registers` each (0: the entry count): the block's pool at entry less
    the producer's, split among the other threads, in 8s, at most 256."""
    block = 32 * (num_warps + producer_warps)
    if not producer_registers:
        return entry_registers(block)
    pool = entry_registers(block) * block - producer_registers * 32 * producer_warps
    return min(256, pool // (32 * num_warps) // 8 * 8)


def producer_registers_problem(num_warps: int, registers: int) -> str | None:
    """What is wrong with a producer warpgroup that keeps `registers` registers a thread
    beside `num_warps` warps (`tv.producer_warp(registers=...)`), or None."""
    if registers % 8 or not 24 <= registers <= 256:
        return f"registers={registers} must be a multiple of 8 in 24..256 (setmaxnreg)"
    if num_warps % WARPGROUP_WARPS:
        return (f"registers={registers} needs num_warps a multiple of {WARPGROUP_WARPS} "
                f"(setmaxnreg acts on whole warpgroups), the kernel has {num_warps}")
    entry = entry_registers(32 * (num_warps + WARPGROUP_WARPS))
    if body_registers(num_warps, WARPGROUP_WARPS, registers) <= entry:
        return (f"registers={registers}: a block of {num_warps} warps and the producer "
                f"warpgroup starts with {entry} registers a thread, so the producer would "
                "give the other warps none")
    return None


@dataclass(frozen=True)
class Program:
    """A kernel: a program for one thread block, run over `grid` blocks.

    `params` are the kernel arguments in order (pointers and scalars); `grid` has 1 to 3
    scalar expressions over the scalar parameters; `constants` records the compile-time
    values the program was specialized with (for display and caching only).

    `producer_warps` (0, 1, or 4: `tv.producer_warp()`): the block gets that many warps
    more, which issue the program's TMA copies; the body still describes what every one
    of the `num_warps` warps does, and the program means what it means without them (the
    interpreter ignores the field). `producer` is the producer warp's own body, which
    the pass `split_producer_warp` derives from `body` (None before it, or without a
    producer warp). `producer_registers` (0, or with a producer warpgroup of 4 warps,
    `tv.producer_warp(registers=R)`): each producer thread keeps R registers and gives
    the rest of its share to the body's warps (`setmaxnreg`; `body_registers`).

    `producer_converts` (`tv.producer_warp(registers=R, converts=True)`): the producer
    warpgroup also runs the `store_shared`s into the shared tiles `dot`s read, with
    every instruction that computes what they store (`split_producer_warp`), as threads
    0..127 of the body run them (what it computes is laid out over those, replicated
    over the body's other threads): the body's warps then only wait and multiply.

    `cluster` (1, 2, 4 or 8: `tv.cluster(n)`): the blocks run in clusters of that many
    consecutive blocks along the grid's first dimension (sm_90), which `copy_async(...,
    multicast=True)` copies share; blocks `n c .. n c + n - 1` form cluster `c`.

    `grid_loc`, `producer_loc` and `cluster_loc`: the user's lines that set the grid
    (`tv.grid`), asked for the producer warp (`tv.producer_warp`) and set the cluster size
    (`tv.cluster`), where checks of those point (the grid's extents, the interpreter's
    limit; a program the producer cannot split; clusters on an arch without them); not
    part of what the program means, so programs equal but for them compare equal.
    """

    name: str
    params: tuple[Pointer | Var, ...]
    grid: tuple[Expr, ...]
    num_warps: int
    body: Seq
    constants: tuple[tuple[str, str], ...] = field(default=())
    producer_warps: int = 0
    producer: Seq | None = None
    producer_registers: int = 0
    cluster: int = 1
    producer_converts: bool = False
    grid_loc: SourceLoc | None = field(default=None, compare=False)
    producer_loc: SourceLoc | None = field(default=None, compare=False)
    cluster_loc: SourceLoc | None = field(default=None, compare=False)

    @property
    def num_threads(self) -> int:
        """The threads that run `body` (over which register tiles are laid out)."""
        return 32 * self.num_warps

    @property
    def block_threads(self) -> int:
        """The threads a launch starts: `num_threads` and the producer warps'."""
        return 32 * (self.num_warps + self.producer_warps)

    @property
    def entry_registers(self) -> int:
        """`entry_registers(block_threads)`."""
        return entry_registers(self.block_threads)

    @property
    def body_registers(self) -> int:
        """`body_registers(num_warps, producer_warps, producer_registers)`: what a thread
        of `body` has after the producer has given up its share."""
        return body_registers(self.num_warps, self.producer_warps, self.producer_registers)
