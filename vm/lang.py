"""What a kernel calls: `from tilevm.vm import lang as tv` (re-exported by `tilevm`).

One function per VM instruction, named like it (`load_global`, `view`, `dot`, ...),
plus `kernel`, `ptr`, `grid`, `range`, `block_idx`, `cdiv`, `static_assert` and the
data types (`tv.f16`, `tv.int4`, `tv.f6e3m2`: every name `tilevm.dtypes` knows).

Functions that emit instructions find the kernel being compiled on a context stack
and fail with a clear `VMError` outside one. They check their arguments (static
shapes, memory spaces, ranks, layout shapes) so that a mistake is reported at the
user's line, in the user's terms, rather than later by the verifier.

Shapes of register and shared tiles are Python ints (compile time); offsets, global
sizes and strides may be runtime values. `layout=` takes a layout object or its text
(`"local(2, 1).spatial(8, 4)"`); omitted, layout inference chooses one.

Naming: `tv.max(tile, dim)` / `tv.min` / `tv.sum` reduce over a dimension (so do the
methods `tile.max(dim)`); `tv.max(a, b)` on scalars is their maximum; the elementwise
maximum of two tiles, or a tile and a scalar, is `tv.maximum(a, b)` (`tv.minimum`).
"""

from __future__ import annotations

import builtins
import numbers
from typing import Any

from tilevm import dtypes as _dtypes
from tilevm.dtypes import DataType
from tilevm.ir.errors import VMError
from tilevm.ir.expr import BOOL, BlockIndex, Expr, free_vars
from tilevm.ir.instructions import Assume
from tilevm.ir.stmt import CLUSTER_SIZES, WARPGROUP_WARPS, producer_registers_problem
from tilevm.ir.types import Pointer
from tilevm.vm import frontend_values as fv
from tilevm.vm.frontend import Inline, Kernel, KernelSignature, inline, kernel, ptr
from tilevm.vm.frontend_values import Scalar, Tile
from tilevm.vm.kernel_compiler import RuntimeRange, make_range
from tilevm.vm.lang_memory import (
    alloc_shared,
    atomic_add,
    cluster_sync,
    copy_async,
    copy_async_commit,
    copy_async_wait,
    free_shared,
    global_view,
    globaltimer,
    launch_dependents,
    load_global,
    load_shared,
    store_global,
    store_shared,
    sync,
    tile_post,
    tile_wait,
    wait_prerequisites,
)
from tilevm.vm.lang_tiles import (
    abs,
    annotate_layout,
    arange,
    cast,
    cdiv,
    dot,
    exp,
    exp2,
    fma,
    full,
    log,
    log2,
    max,
    maximum,
    min,
    minimum,
    print,
    rsqrt,
    sqrt,
    sum,
    view,
    where,
    zeros,
)
from tilevm.vm.tile_policies import (
    AffineSync,
    RowSync,
    StridedSync,
    TileSync,
    check_policy,
    check_sync_graph,
    take_ticket,
    tile_of,
)

__all__ = [
    "kernel", "inline", "Inline", "ptr", "grid", "producer_warp", "cluster", "range",
    "static_assert", "assume", "block_idx", "cdiv",
    "global_view", "load_global", "store_global", "atomic_add", "globaltimer", "tile_post",
    "tile_wait", "TileSync", "RowSync", "StridedSync", "AffineSync", "tile_of",
    "take_ticket", "check_policy", "check_sync_graph",
    "alloc_shared", "free_shared", "load_shared", "store_shared", "copy_async",
    "copy_async_commit", "copy_async_wait", "sync", "cluster_sync", "launch_dependents",
    "wait_prerequisites", "full", "zeros", "arange", "view", "cast",
    "where", "sum", "max", "min", "maximum", "minimum", "fma", "dot", "annotate_layout",
    "print", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "Kernel", "KernelSignature",
    "Tile", "Scalar", "VMError", "DataType",
    "RuntimeRange",
    "int1", "int2", "int3", "int4", "int5", "int6", "int7", "int8", "int16", "int32", "int64",
    "uint1", "uint2", "uint3", "uint4", "uint5", "uint6", "uint7", "uint8", "uint16",
    "uint32", "uint64", "f16", "bf16", "f32", "f8e4m3", "f8e5m2", "f6e3m2", "f6e2m3",
    "f4e2m1", "bool_",
]

# ---- data types --------------------------------------------------------------------------

int1, int2, int3, int4 = (_dtypes.parse(f"int{b}") for b in (1, 2, 3, 4))
int5, int6, int7, int8 = (_dtypes.parse(f"int{b}") for b in (5, 6, 7, 8))
uint1, uint2, uint3, uint4 = (_dtypes.parse(f"uint{b}") for b in (1, 2, 3, 4))
uint5, uint6, uint7, uint8 = (_dtypes.parse(f"uint{b}") for b in (5, 6, 7, 8))
int16, int32, int64 = (_dtypes.parse(n) for n in ("int16", "int32", "int64"))
uint16, uint32, uint64 = (_dtypes.parse(n) for n in ("uint16", "uint32", "uint64"))
f16, bf16, f32 = (_dtypes.parse(n) for n in ("f16", "bf16", "f32"))
f8e4m3, f8e5m2, f6e3m2, f6e2m3, f4e2m1 = (
    _dtypes.parse(n) for n in ("f8e4m3", "f8e5m2", "f6e3m2", "f6e2m3", "f4e2m1"))
bool_ = BOOL


def __getattr__(name: str) -> DataType:
    # Every other type name `tilevm.dtypes` knows: tv.f5e2m2, tv.f7e3m3, ...
    try:
        return getattr(_dtypes, name)
    except AttributeError:
        raise AttributeError(f"module 'tilevm.vm.lang' has no attribute {name!r}") from None


# ---- launch ------------------------------------------------------------------------------

def grid(*dims: Any) -> None:
    """The number of blocks along x (and y, z): ints or expressions of scalar params."""
    ctx = fv.current("tv.grid")
    first = ctx.builder.grid_loc
    if first is not None:
        raise VMError(f"tv.grid is called twice (first at line {first.line})")
    where = ctx.runtime_construct()
    if where:
        raise VMError(f"tv.grid cannot be called inside a {where}")
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = tuple(dims[0])
    if not 1 <= len(dims) <= 3:
        raise VMError(f"tv.grid takes 1 to 3 dimensions, got {len(dims)}")
    params = {p for p in ctx.builder.params if not isinstance(p, Pointer)}
    exprs = []
    for i, d in enumerate(dims):
        expr = fv.to_expr(d, f"grid dimension {i}")
        if expr.dtype.is_float:
            raise VMError(f"grid dimension {i} must be an integer, got {expr.dtype}")
        stray = free_vars(expr) - params
        if stray or _reads_block_idx(expr):
            raise VMError(f"grid dimension {i} ({expr}) must be computed from scalar "
                          "parameters and constants only")
        exprs.append(expr)
    ctx.builder.set_grid(*exprs)  # records the line, for later checks of the grid


def producer_warp(registers: int | None = None, converts: bool = False) -> None:
    """Give the block one more warp, which issues the program's TMA copies (sm_90a): the
    other warps then wait only for the copies they read, never for each other's
    progress, and a copy into a buffer starts as soon as every warp has released it
    (passed the point where the program writes the copy, with the wgmmas reading the
    buffer retired). The program means what it means without this call (the
    interpreter ignores it); the compiler refuses a program it cannot split this way
    (`split_producer_warp`: every copy through TMA, a copy in every group, no shared
    tensor in a copied buffer's bytes, copies addressed by scalars only).

    With `registers` (a multiple of 8 in 24..256) the producer is a whole warpgroup (4
    warps; one thread issues) that keeps `registers` registers a thread and gives the
    rest of its share to the other warps (`setmaxnreg`): a block of 8 warps and the
    producer starts with 168 registers a thread, and with `registers=40` the 8 warps
    then have 232 (`Program.body_registers`). `num_warps` must be a multiple of 4.

    With `converts=True` (and `registers`) the producer warpgroup also runs every
    `store_shared` into a shared tile that a `dot` reads, with all the instructions
    that compute what is stored (global loads, casts, views, arithmetic, loop-carried
    tiles), as the program's threads 0..127 run them: the other warps then only wait
    for those tiles and multiply. What it computes must be laid out over those 128
    threads (replicated over the others, whose copies it leaves out). A tile stored
    there has a "full" and an "empty" barrier of its own: the producer stores once the
    other warps have released the tile (passed the program's store, with the wgmmas
    reading it retired), and a `dot` reading it waits for the store it reads. The
    compiler refuses what it cannot split this way (a stored value the other warps also
    use, a shared load in what computes it, a stored tile another instruction reads)."""
    ctx = fv.current("tv.producer_warp")
    if ctx.builder.producer_warps:
        first = ctx.builder.producer_loc
        first = f" (first at line {first.line})" if first else ""
        raise VMError(f"tv.producer_warp is called twice{first}")
    where = ctx.runtime_construct()
    if where:
        raise VMError(f"tv.producer_warp cannot be called inside a {where}")
    if registers is not None and (not isinstance(registers, numbers.Integral)
                                  or isinstance(registers, bool)):
        raise VMError(f"tv.producer_warp(registers=...) takes an int, got "
                      f"{fv.describe(registers)}")
    if not isinstance(converts, bool):
        raise VMError(f"tv.producer_warp(converts=...) takes a bool, got "
                      f"{fv.describe(converts)}")
    if converts and registers is None:
        raise VMError("tv.producer_warp(converts=True) needs registers=R: the converting "
                      "producer is a warpgroup, which gives the body its registers")
    warps = 1 if registers is None else WARPGROUP_WARPS
    if ctx.builder.num_warps + warps > 32:
        raise VMError(f"tv.producer_warp: the block already has {ctx.builder.num_warps} "
                      f"warps, the most a block may have is 32 ({warps} more asked for)")
    problem = registers is not None and producer_registers_problem(ctx.builder.num_warps,
                                                                   int(registers))
    if problem:
        raise VMError(f"tv.producer_warp: {problem}")
    ctx.builder.producer_loc = ctx.builder.loc
    ctx.builder.producer_warps = warps
    ctx.builder.producer_converts = converts
    if registers is not None:
        ctx.builder.producer_registers = int(registers)


def cluster(blocks: int) -> None:
    """Run the blocks in clusters of `blocks` (2, 4 or 8) consecutive blocks along the
    grid's first dimension (sm_90): blocks `n c .. n c + n - 1` of that dimension form
    cluster `c`, are resident at once, and may share tiles through
    `tv.copy_async(..., multicast=True)`. The launch refuses a grid whose first extent
    is not a multiple of `blocks`."""
    ctx = fv.current("tv.cluster")
    if ctx.builder.cluster != 1:
        raise VMError(f"tv.cluster is called twice (clusters of {ctx.builder.cluster} "
                      "already)")
    where = ctx.runtime_construct()
    if where:
        raise VMError(f"tv.cluster cannot be called inside a {where}")
    if not isinstance(blocks, numbers.Integral) or isinstance(blocks, bool) \
            or blocks not in CLUSTER_SIZES[1:]:
        raise VMError(f"tv.cluster takes 2, 4 or 8 blocks, got {fv.describe(blocks)}")
    ctx.builder.cluster = int(blocks)
    ctx.builder.cluster_loc = ctx.builder.loc


def _reads_block_idx(expr: Any) -> bool:
    if isinstance(expr, BlockIndex):
        return True
    return builtins.any(_reads_block_idx(v) for v in vars(expr).values() if isinstance(v, Expr))


def block_idx(axis: int = 0) -> Scalar:
    """This block's index in the grid along `axis` (0, 1, 2)."""
    fv.current("tv.block_idx")
    axis = fv.static_int(axis, "tv.block_idx axis")
    if axis not in (0, 1, 2):
        raise VMError(f"tv.block_idx axis must be 0, 1 or 2, got {axis}")
    return Scalar(BlockIndex(axis))


def range(start: Any, stop: Any = None, step: Any = 1, *, unroll: int | None = None
          ) -> RuntimeRange:
    """`for i in tv.range(...)`: a loop kept in the IR (`unroll` is a hint), even with
    Python-int bounds. Python's `range` with int bounds is unrolled at compile time."""
    return make_range(start, stop, step, unroll=unroll)


def static_assert(cond: Any, msg: str = "") -> None:
    """Check a compile-time condition while the kernel is specialized."""
    if isinstance(cond, (Scalar, Tile)):
        raise VMError("tv.static_assert needs a compile-time condition, got a runtime value")
    if not cond:
        raise VMError(f"static_assert failed: {msg}" if msg else "static_assert failed")


def assume(cond: Any) -> None:
    """Promise that the runtime condition `cond` holds here (e.g. `N % 8 == 0`); the
    compiler may rely on it (a top-level `tv.assume(N % 8 == 0)` lets rows of stride N
    be accessed as vectors). Breaking it is an error: the interpreter reports it, and
    so does the runtime before launch for conditions over scalar arguments only. A
    compile-time `True` is a no-op; `False` fails at once."""
    ctx = fv.current("tv.assume")
    if isinstance(cond, Tile):
        raise VMError(f"tv.assume needs a scalar condition, got the tile {cond}")
    if not isinstance(cond, Scalar):
        if isinstance(cond, bool) or type(cond).__name__ == "bool_":
            if not cond:
                raise VMError("tv.assume(False): the condition is false at compile time",
                              None, ctx.builder.loc)
            return
        raise VMError(f"tv.assume needs a condition (a runtime bool or a Python bool), got "
                      f"{fv.describe(cond)}")
    expr = cond.expr
    if expr.dtype != BOOL:
        raise VMError(f"tv.assume needs a bool condition, got {expr} of type {expr.dtype} "
                      "(compare it: `x % 8 == 0`)")
    ctx.builder.emit(Assume(cond=expr, loc=ctx.builder.loc))
