"""The reference interpreter: runs a VM `Program` over its whole grid on numpy.

It is the executable specification of the VM; every compiled kernel is tested against
it. `run(program, args)` executes the blocks one after another (x fastest, then y, z),
each block's statements in order, and mutates the output arrays in place. Each
instruction's semantics is the method `Interpreter.exec_<opname>`.

Arguments (in the order of `program.params`)
--------------------------------------------
- A pointer to elements of `dtype` is a C-contiguous numpy array (any shape; it is
  seen flat) of `array_dtype(dtype)`: float16/float32 for f16/f32, the numpy integer
  type for 8..64-bit integers, uint16 *codes* for bf16, uint8 codes for 8-bit float
  formats (f8e4m3, f8e5m2, ...), and uint8 *densely packed bytes* for sub-byte types
  (element i at bits [i*b, (i+1)*b), `dtypes.pack`). `to_host` / `from_host` convert.
- A scalar is a Python (or numpy) int for integer types (it must fit the type), an int
  or float for float types (rounded to the type).
Anything else is a `VMError` naming the parameter, before any block runs.

Values
------
Register tiles are float64 arrays of exact values of their dtype; every operation
rounds once to its output dtype (see `vm/interp_values.py`): conversions (cast, a load
or store into another dtype, `full`, float results into integers) round to nearest
even and saturate like `dtypes.encode`; integer arithmetic wraps (two's complement).
Scalar expressions follow ir/expr.py: int32 arithmetic wraps, `//` and `%` are floor
division and modulo (a zero divisor is a `VMError`), shift amounts are unsigned (>= the
width gives 0, or -1 for `>>` of a negative value), float arithmetic is rounded to the
expression's float type, an integer literal outside its type wraps (C's conversion).
NaN: data movement (loads, stores, copies, `view`, `where`, `assign`, same-type casts)
keeps a NaN's exact code, as the hardware does; arithmetic produces the format's
canonical NaN (`DataType.nan_code`); `min`/`max` (elementwise and reductions) propagate
NaN, like PTX `max.NaN`.

- `dot`: float inputs are converted to float32 exactly (a `VMError` if a value is not
  a float32: every input format of at most 24 significant bits qualifies), multiplied
  with float32 accumulation (`np.matmul` on float32: every product of two f16/bf16/f8
  values is exact, the summation order is BLAS's), `c` is added in float32, and the
  result is rounded once to `out`'s dtype. Integer inputs with an integer `c` and
  result multiply-accumulate exactly (int64) and wrap into the result type.
- `reduce`: float sums are computed in float64 (numpy's pairwise sum) and rounded once
  to `out`'s dtype (exact for any realistic f16/bf16 tile; the GPU's f32 accumulation
  may differ in the last f32 bits); integer sums are exact and wrap; max/min are exact.

Memory
------
- Global views: element `c` of a view is element `offset + sum(c[i] * strides[i])` of
  the pointer's buffer, at bit `element * b` (the view's dtype may differ from the
  pointer's: the buffer is reinterpreted bit for bit). A view that reaches outside its
  argument's buffer is a `VMError` when it is created; loads and stores are
  bounds-checked against the view's shape (out-of-shape loads read `other`, copies
  read 0, stores skip the element). Stores through a `readonly` pointer (or into a
  read-only numpy array) are a `VMError`.
- Shared memory: one byte array per allocation (`SharedLayout.size_bytes`; a tensor
  without a layout gets `row_major`), elements placed bit-exactly at
  `SharedLayout.offset_bits`, so swizzles and sub-byte packing are exercised.
  `free_shared` ends the lifetime: later use is a `VMError`. Reading shared memory that
  was never written is a `VMError` (`check_uninitialized=False` turns it off).
- `copy_async` reads global memory and fills its shared tile when it is issued (so a
  racy program still gets deterministic data), but the race checker treats the tile
  as in flight until a `copy_async_wait` retires its commit group.

Verification and limits
-----------------------
`run` first verifies the program (`ir.verifier.verify`, the compiler's first pass), so
a program the compiler rejects is rejected here too, with the same `VMError` and line.
The interpreter runs blocks one after another and loop trips one by one, so it refuses
up front (a `VMError`, not a hang) a grid of more than 2^16 blocks (`max_blocks`, or the
environment variable TILEVM_INTERP_MAX_BLOCKS) and a loop of more than 2^20 trips
(`max_loop_trips`, or TILEVM_INTERP_MAX_LOOP_TRIPS), counted when the loop starts, from
its evaluated bounds. Nested loops multiply: the limit is per loop.

Races (`check_races=True`)
--------------------------
Per shared allocation and per unit of `gcd(element bits, 8)` bits, the interpreter
records which threads wrote and read it since the last `sync`. Writers of a
`store_shared` are the owners (under the stored tile's register layout, replicas
included) of each element; readers of a `load_shared` are the owners under the loaded
tile's layout; a tile without a layout is an *unknown* thread, which conflicts with
every other access. A `copy_async` is an unknown writer: its tile is in flight (any
access is a race) until a `copy_async_wait` retires its group, then written by an
unknown thread until the next `sync`. Between two syncs it is a race for a thread to
read what another thread wrote (RAW), to write what another thread read (WAR) or
wrote (WAW). The `VMError` names the element, both threads and both source lines.
Global memory is not race-checked here (blocks run one after another; but see "Blocks
that wait" below). Launches run one after another too, so `launch_dependents` and
`wait_prerequisites` do nothing here.

Blocks that wait (`tile_post`, `tile_wait`)
-------------------------------------------
A program with these runs its blocks as threads under a scheduler that lets one run at
a time and switches only at a post or a wait (`vm/interp_blocks.py`): in order by
default, a block that waits giving way to the next ready one. `run_together` runs
several launches so, a producer and its consumer sharing arrays, in an interleaving a
seed picks at random at every post and wait (a consumer's blocks may start first). A
wait that no block left can satisfy is a deadlock: a `VMError` at that wait's line.
Memory is sequentially consistent here; the GPU's release and acquire give the same
results to a program whose reads of another block's writes follow a wait for them, and
that is what such a run checks: an access to a global element another block wrote,
with no post/wait or atomic ordering that write before it, is a race, a `VMError` at
the access's line naming the writer's (`vm/interp_global_races.py`).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from typing import Any

from tilevm.dtypes import DTypeError
from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.expr import Var
from tilevm.ir.printer import format_instruction
from tilevm.ir.stmt import AssignVar, For, If, Let, Program, Seq
from tilevm.ir.transform import instructions
from tilevm.ir.verifier import verify
from tilevm.layouts.errors import LayoutError
from tilevm.vm.interp_blocks import BlockScheduler, Task
from tilevm.vm.interp_cluster import ClusterSemantics, join_clusters, uses_clusters
from tilevm.vm.interp_exec_tiles import TileSemantics
from tilevm.vm.interp_global_races import GlobalRaces
from tilevm.vm.interp_state import AsyncCopy, limit_hint
from tilevm.vm.interp_values import array_dtype, convert_scalar, from_host, to_host

__all__ = ["run", "run_together", "Interpreter", "array_dtype", "to_host", "from_host"]


def run(program: Program, args: Sequence[Any], *, check_races: bool = True,
        check_uninitialized: bool = True, max_blocks: int | None = None,
        max_loop_trips: int | None = None) -> None:
    """Verify `program` (`ir.verifier.verify`) and run it over its whole grid with `args`
    (see the module docstring for their formats), mutating the argument arrays in place.
    Every violation of the VM's rules is a `VMError` naming the instruction and its
    source line. `max_blocks` and `max_loop_trips` bound the work (module docstring,
    "Limits"); None takes the environment variable or the default."""
    Interpreter(program, check_races=check_races, check_uninitialized=check_uninitialized,
                max_blocks=max_blocks, max_loop_trips=max_loop_trips).run(args)


def run_together(launches: Sequence[tuple[Program, Sequence[Any]]], *,
                 seed: int | None = None, check_global_races: bool = True,
                 **options: Any) -> None:
    """Run the launches' blocks interleaved, as kernels running at the same time on the
    GPU (a producer and a consumer synchronized by `tile_post` / `tile_wait`; module
    docstring, "Blocks that wait"): arguments that are the same numpy array are the
    same memory. `seed` picks the interleaving; None runs the blocks in order, the
    first launch's first. `check_global_races`: report unordered accesses to another
    block's writes. `options` as `run`'s."""
    interpreters = []
    for program, args in launches:
        interp = Interpreter(program, **options)
        interp.prepare(args)
        interpreters.append(interp)
    scheduler = BlockScheduler(seed)
    blocks = [(k, block) for k, interp in enumerate(interpreters) for block in interp.blocks()]
    races = GlobalRaces(len(blocks)) if check_global_races else None
    tasks = []
    for number, (k, block) in enumerate(blocks):
        state = copy.copy(interpreters[k])
        state.scheduler, state.races, state.block_id = scheduler, races, number
        key = (k, block) if len(interpreters) > 1 else block
        state.task = Task(key, functools.partial(_start_block, state, block))
        tasks.append(state.task)
    join_clusters([task.run.args[0] for task in tasks], blocks)
    scheduler.run(tasks)


def _start_block(state: Interpreter, block: tuple[int, int, int]) -> None:
    if state.races is not None:
        state.races.start(state.block_id)
    state._run_block(block)


# ---- helpers -----------------------------------------------------------------------------

def _format_instruction(inst: ins.Instruction) -> str:
    try:
        return format_instruction(inst)
    except Exception:  # the printer is optional here: never let it hide the real error
        return type(inst).__name__


def _format_stmt(stmt: Any) -> str:
    if isinstance(stmt, For):
        return f"for {stmt.var} in range({stmt.start}, {stmt.stop}, {stmt.step})"
    if isinstance(stmt, If):
        return f"if {stmt.cond}"
    if isinstance(stmt, Let):
        return f"let {stmt.var}: {stmt.var.dtype} = {stmt.value}"
    if isinstance(stmt, AssignVar):
        return f"{stmt.var} = {stmt.value}"
    return type(stmt).__name__


# ---- the interpreter ---------------------------------------------------------------------

class Interpreter(ClusterSemantics, TileSemantics):
    """Runs one program; `run(args)` may be called repeatedly. It walks the statements;
    each instruction runs as the `exec_<opname>` method of its semantics class."""

    # ---- entry ------------------------------------------------------------------------
    def run(self, args: Sequence[Any]) -> None:
        if uses_clusters(self.program) or any(isinstance(i, (ins.TileWait, ins.TilePost))
                                              for i in instructions(self.program.body)):
            run_together([(self.program, args)], check_races=self.check_races,
                         check_uninitialized=self.check_uninitialized,
                         max_blocks=self.max_blocks, max_loop_trips=self.max_loop_trips)
            return
        self.prepare(args)
        for block in self.blocks():
            self._run_block(block)

    def prepare(self, args: Sequence[Any]) -> None:
        """Verify the program (once) and bind `args`."""
        if not getattr(self, "_verified", False):
            verify(self.program)  # the compiler's first pass: one set of rules for both
            self._verified = True
        self._bind(args)

    def blocks(self) -> list[tuple[int, int, int]]:
        """The grid's blocks in the order they run: x fastest, then y, z."""
        try:
            grid = self._grid()
        except VMError as exc:  # its extents, its cluster, its size: at the tv.grid line
            if exc.loc is not None:
                raise
            raise VMError(exc.message, exc.instruction, self.program.grid_loc) from None
        return [(x, y, z) for z in range(grid[2]) for y in range(grid[1])
                for x in range(grid[0])]

    def _run_block(self, block: tuple[int, int, int]) -> None:
        self.block = block
        self.scalars: dict[Var, int | float] = dict(self.param_scalars)
        self.values: dict[str, Any] = {}
        self.epoch = 0
        self.steps = 0  # instructions executed (`globaltimer`)
        self.cluster_phase = 0
        self.copies: list[AsyncCopy] = []
        self.uncommitted: list[int] = []
        self.groups: list[list[int]] = []
        self._stmt(self.program.body)

    # ---- statements ---------------------------------------------------------------------
    def _stmt(self, stmt: Any) -> None:
        if isinstance(stmt, ins.Instruction):
            self._instruction(stmt)
            return
        if isinstance(stmt, Seq):
            for s in stmt.body:
                self._stmt(s)
            return
        try:
            if isinstance(stmt, For):
                start, stop, step = (self._eval_int(e, what) for e, what in (
                    (stmt.start, "loop start"), (stmt.stop, "loop stop"),
                    (stmt.step, "loop step")))
                if step == 0:
                    raise VMError("loop step is 0")
                trips = len(range(start, stop, step))
                if trips > self.max_loop_trips:
                    raise VMError(f"the loop has {trips} trips, more than the interpreter "
                                  f"runs ({self.max_loop_trips}); "
                                  f"{limit_hint('max_loop_trips')}")
                for value in range(start, stop, step):
                    self.scalars[stmt.var] = convert_scalar(value, stmt.var.dtype)
                    self._stmt(stmt.body)
            elif isinstance(stmt, If):
                if self._eval(stmt.cond):
                    self._stmt(stmt.then_body)
                elif stmt.else_body is not None:
                    self._stmt(stmt.else_body)
            elif isinstance(stmt, Let):
                self.scalars[stmt.var] = convert_scalar(self._eval(stmt.value), stmt.var.dtype)
            elif isinstance(stmt, AssignVar):
                if stmt.var not in self.scalars:
                    raise VMError(f"assignment to {stmt.var}, which no `let` declared")
                self.scalars[stmt.var] = convert_scalar(self._eval(stmt.value), stmt.var.dtype)
            else:
                raise VMError(f"unknown statement {type(stmt).__name__}")
        except VMError as exc:
            if exc.loc is not None or exc.instruction is not None:
                raise
            raise VMError(exc.message, _format_stmt(stmt), getattr(stmt, "loc", None)) from None

    def _instruction(self, inst: ins.Instruction) -> None:
        self._inst = inst
        self.steps += 1
        method = getattr(self, f"exec_{inst.opname}", None)
        try:
            if method is None:
                raise VMError(f"the interpreter does not implement instruction {inst.opname!r}")
            method(inst)
        except VMError as exc:
            if exc.loc is not None or exc.instruction is not None:
                raise
            raise VMError(exc.message, _format_instruction(inst), inst.loc) from None
        except (DTypeError, LayoutError) as exc:
            raise VMError(str(exc), _format_instruction(inst), inst.loc) from exc
