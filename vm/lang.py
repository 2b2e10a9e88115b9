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
import math
import numbers
from collections.abc import Sequence
from typing import Any

from tilevm import dtypes as _dtypes
from tilevm.dtypes import DataType
from tilevm.ir.errors import VMError
from tilevm.ir.expr import BOOL, BlockIndex, Expr, Select, free_vars
from tilevm.ir.instructions import Assume
from tilevm.ir.stmt import CLUSTER_SIZES, WARPGROUP_WARPS, producer_registers_problem
from tilevm.ir.types import MemorySpace, Pointer
from tilevm.layouts import RegisterLayout, SharedLayout, parse_layout
from tilevm.vm import frontend_values as fv
from tilevm.vm.frontend import Kernel, KernelSignature, RuntimeRange, kernel, make_range, ptr
from tilevm.vm.frontend_values import Scalar, Tile

__all__ = [
    "kernel", "ptr", "grid", "producer_warp", "cluster", "range", "static_assert", "assume",
    "block_idx", "cdiv",
    "global_view", "load_global", "store_global", "atomic_add", "alloc_shared", "free_shared",
    "load_shared", "store_shared", "copy_async", "copy_async_commit", "copy_async_wait",
    "sync", "full", "zeros", "view", "cast", "where", "sum", "max", "min", "maximum",
    "minimum", "fma", "dot", "annotate_layout", "print", "exp", "exp2", "log", "log2", "sqrt",
    "rsqrt", "abs", "Kernel", "KernelSignature", "Tile", "Scalar", "VMError", "DataType",
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


# ---- argument checks ---------------------------------------------------------------------

def _tile(value: Any, what: str, space: MemorySpace) -> Tile:
    if not isinstance(value, Tile):
        raise VMError(f"{what} must be a {space.value} tile, got {fv.describe(value)}")
    if value.space is not space:
        raise VMError(f"{what} must be a {space.value} tile, but {value} is in "
                      f"{value.space.value} memory")
    return value


def _register(value: Any, what: str) -> Tile:
    if isinstance(value, Tile):
        value.require_register(what)
        return value
    raise VMError(f"{what} must be a register tile, got {fv.describe(value)}")


def _seq(values: Any) -> list[Any]:
    if isinstance(values, (Scalar, numbers.Number)):
        return [values]
    try:
        return list(values)
    except TypeError:
        raise VMError(f"expected a list, got {fv.describe(values)}") from None


def _offsets(offsets: Any, ndim: int, what: str) -> list[Any]:
    items = _seq(offsets)
    if len(items) != ndim:
        raise VMError(f"{what}: {len(items)} offset(s) for a {ndim}-d tensor")
    return [fv.to_expr(o, f"{what} offset {i}") for i, o in enumerate(items)]


def _layout(layout: Any, shape: tuple[int, ...], space: MemorySpace, what: str) -> Any:
    if layout is None:
        return None
    if isinstance(layout, str):
        layout = parse_layout(layout)
    kind = RegisterLayout if space is MemorySpace.REGISTER else SharedLayout
    if not isinstance(layout, kind):
        raise VMError(f"{what}: a {space.value} tile needs a {kind.__name__}, got "
                      f"{fv.describe(layout)}")
    if tuple(layout.shape) != tuple(shape):
        raise VMError(f"{what}: the layout {layout} covers shape {list(layout.shape)}, "
                      f"the tile has shape {list(shape)}")
    return layout


def _check_inside(offsets: list[Any], shape: Sequence[int], outer: Sequence[Any],
                  what: str) -> None:
    """A static tile at static offsets must lie inside a static tensor."""
    for i, (o, n, m) in enumerate(zip(offsets, shape, outer)):
        value = getattr(o, "value", None)
        if isinstance(value, int) and isinstance(m, int) and not 0 <= value <= m - n:
            raise VMError(f"{what}: the tile [{value}, {value + n}) in dimension {i} does not "
                          f"lie inside the tensor's {m}")


def _builder(what: str) -> Any:
    return fv.current(what).builder


# ---- launch ------------------------------------------------------------------------------

def grid(*dims: Any) -> None:
    """The number of blocks along x (and y, z): ints or expressions of scalar params."""
    ctx = fv.current("tv.grid")
    if ctx.grid_loc is not None:
        raise VMError(f"tv.grid is called twice (first at line {ctx.grid_loc.line})")
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
    ctx.grid_loc = ctx.builder.loc
    ctx.builder.set_grid(*exprs)


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
        first = f" (first at line {ctx.producer_loc.line})" if ctx.producer_loc else ""
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
    ctx.producer_loc = ctx.builder.loc
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


# ---- scalars -----------------------------------------------------------------------------

def cdiv(a: Any, b: Any) -> Any:
    """`ceil(a / b)` for integers (Python ints give a Python int)."""
    for v in (a, b):
        if isinstance(v, Tile) or not (isinstance(v, Scalar) or isinstance(v, numbers.Integral)):
            raise VMError(f"tv.cdiv takes integers, got {fv.describe(v)}")
    if isinstance(a, numbers.Integral) and isinstance(b, numbers.Integral):
        return -(-int(a) // int(b))
    return fv.scalar_binary("cdiv", a, b)


def _scalar_minmax(op: str, a: Any, b: Any) -> Any:
    for v in (a, b):
        if not (isinstance(v, Scalar) or fv.is_number(v)):
            raise VMError(f"tv.{op} takes scalars, got {fv.describe(v)}")
    if fv.is_number(a) and fv.is_number(b):
        return builtins.max(a, b) if op == "max" else builtins.min(a, b)
    return fv.scalar_binary(op, a, b)


def _minmax(op: str, x: Any, y: Any, dim: Any, keepdim: bool) -> Any:
    if isinstance(x, Tile):
        d = y if dim is None else dim
        if d is None:
            raise VMError(f"tv.{op}(tile) needs the dimension to reduce: tv.{op}(x, dim)")
        if isinstance(d, bool) or not isinstance(d, numbers.Integral):
            raise VMError(f"tv.{op}(tile, dim) reduces over a dimension; the elementwise "
                          f"{op}imum of two values is tv.{op}imum(a, b)")
        return fv.reduce_tile(op, x, d, keepdim)
    if y is None:
        raise VMError(f"tv.{op} takes a tile and a dimension, or two scalars")
    if isinstance(y, Tile):
        raise VMError(f"the elementwise {op}imum of a tile is tv.{op}imum(a, b)")
    return _scalar_minmax(op, x, y)


def max(x: Any, y: Any = None, /, *, dim: Any = None, keepdim: bool = False) -> Any:
    """`tv.max(tile, dim)`: reduce over `dim`; `tv.max(a, b)` on scalars: the larger."""
    return _minmax("max", x, y, dim, keepdim)


def min(x: Any, y: Any = None, /, *, dim: Any = None, keepdim: bool = False) -> Any:
    """`tv.min(tile, dim)`: reduce over `dim`; `tv.min(a, b)` on scalars: the smaller."""
    return _minmax("min", x, y, dim, keepdim)


def sum(x: Any, dim: Any, keepdim: bool = False, layout: Any = None) -> Tile:
    """Sum a register tile over `dim` (floats accumulate in f32); `layout` asks for the
    result's layout (a `view` of the sum needs it)."""
    t = _register(x, "tv.sum")
    d = fv.static_int(dim, "the dimension of sum")
    if layout is not None and -t.ndim <= d < t.ndim:  # (reduce_tile reports a bad dim)
        shape = list(t.tensor.type.static_shape)
        shape[d % t.ndim:d % t.ndim + 1] = [1] if keepdim else []
        layout = _layout(layout, tuple(shape), MemorySpace.REGISTER, "tv.sum")
    return fv.reduce_tile("sum", t, d, keepdim, layout)


def maximum(a: Any, b: Any) -> Any:
    """Elementwise maximum (tiles broadcast; scalars allowed)."""
    if isinstance(a, Tile) or isinstance(b, Tile):
        return fv.tile_binary("max", a, b)
    return _scalar_minmax("max", a, b)


def minimum(a: Any, b: Any) -> Any:
    """Elementwise minimum (tiles broadcast; scalars allowed)."""
    if isinstance(a, Tile) or isinstance(b, Tile):
        return fv.tile_binary("min", a, b)
    return _scalar_minmax("min", a, b)


def fma(a: Any, b: Any, c: Any) -> Tile:
    """`a * b + c` with one rounding, elementwise on float tiles (tiles broadcast; scalars
    allowed; at least one operand a tile): the exact result rounded to the tiles' dtype,
    one `fma` instruction on the GPU where `a * b + c` is two roundings."""
    if not any(isinstance(v, Tile) for v in (a, b, c)):
        raise VMError("tv.fma works on tiles (at least one operand a tile); for scalars "
                      "write a * b + c")
    return fv.tile_fma(a, b, c)


def _unary(op: str, x: Any, py: Any) -> Any:
    if isinstance(x, Tile):
        return fv.tile_unary(op, x)
    if isinstance(x, Scalar):
        raise VMError(f"tv.{op} works on tiles and Python numbers, not on runtime scalars")
    if fv.is_number(x):
        return py(x)
    raise VMError(f"tv.{op} takes a tile, got {fv.describe(x)}")


def exp(x: Any) -> Any:
    return _unary("exp", x, math.exp)


def exp2(x: Any) -> Any:
    return _unary("exp2", x, lambda v: 2.0 ** v)


def log(x: Any) -> Any:
    return _unary("log", x, math.log)


def log2(x: Any) -> Any:
    return _unary("log2", x, math.log2)


def sqrt(x: Any) -> Any:
    return _unary("sqrt", x, math.sqrt)


def rsqrt(x: Any) -> Any:
    return _unary("rsqrt", x, lambda v: 1.0 / math.sqrt(v))


def abs(x: Any) -> Any:
    if isinstance(x, (Tile, Scalar)) or fv.is_number(x):
        return builtins.abs(x)
    raise VMError(f"tv.abs takes a tile or a scalar, got {fv.describe(x)}")


# ---- global memory -----------------------------------------------------------------------

def global_view(ptr: Any, shape: Any, strides: Any = None, offset: Any = 0,
                dtype: Any = None) -> Tile:
    """View global memory at `ptr + offset` as a tensor of `shape` (ints or runtime
    sizes), row-major unless `strides` (elements) are given. Reads nothing."""
    b = _builder("tv.global_view")
    if not isinstance(ptr, Pointer):
        raise VMError(f"tv.global_view needs a pointer parameter, got {fv.describe(ptr)}")
    dims = [fv.to_expr(s, f"global_view shape[{i}]") for i, s in enumerate(_seq(shape))]
    if strides is not None:
        strides = [fv.to_expr(s, f"global_view strides[{i}]")
                   for i, s in enumerate(_seq(strides))]
        if len(strides) != len(dims):
            raise VMError(f"tv.global_view: {len(strides)} strides for {len(dims)} dimensions")
    if dtype is not None:
        dtype = fv.as_dtype(dtype, "tv.global_view dtype")
    return Tile(b.global_view(ptr, dims, strides, fv.to_expr(offset, "global_view offset"),
                              dtype))


def load_global(src: Any, offsets: Any, shape: Any, layout: Any = None,
                other: Any = 0) -> Tile:
    """The register tile `src[offsets + i]` for `i` over the static `shape`; elements
    outside `src` read `other`. The tile has `src`'s dtype (convert with `tv.cast`)."""
    b = _builder("tv.load_global")
    t = _tile(src, "tv.load_global source", MemorySpace.GLOBAL)
    shape = fv.static_shape(shape, "tv.load_global shape")
    if len(shape) != t.ndim:
        raise VMError(f"tv.load_global: shape {list(shape)} for a {t.ndim}-d tensor")
    offs = _offsets(offsets, t.ndim, "tv.load_global")
    layout = _layout(layout, shape, MemorySpace.REGISTER, "tv.load_global")
    if not fv.is_number(other):
        raise VMError(f"tv.load_global other must be a Python number, got {fv.describe(other)}")
    return Tile(b.load_global(t.tensor, offs, shape, layout, other))


def store_global(dst: Any, value: Any, offsets: Any) -> None:
    """`dst[offsets + i] = value[i]` for the elements inside `dst`."""
    b = _builder("tv.store_global")
    t = _tile(dst, "tv.store_global destination", MemorySpace.GLOBAL)
    v = _register(value, "tv.store_global value")
    if v.ndim != t.ndim:
        raise VMError(f"tv.store_global: a {v.ndim}-d tile into a {t.ndim}-d tensor")
    b.store_global(t.tensor, v.tensor, _offsets(offsets, t.ndim, "tv.store_global"))


def atomic_add(dst: Any, offsets: Any, value: Any = 1) -> Scalar:
    """Once for the block, atomically against every other block: `old = dst[offsets];
    dst[offsets] += value` on an int32 global tensor; returns `old` (the same in every
    thread). A block's global writes before it are visible to the blocks whose
    `atomic_add` on that element comes after it (`ir.instructions.AtomicAdd`): the last
    of `n` blocks to count in (`old == n - 1`) may read what the others wrote."""
    b = _builder("tv.atomic_add")
    t = _tile(dst, "tv.atomic_add destination", MemorySpace.GLOBAL)
    if t.dtype != _dtypes.parse("int32"):
        raise VMError(f"tv.atomic_add needs an int32 tensor, got {t.dtype}")
    if isinstance(value, Tile) or not (isinstance(value, Scalar) or fv.is_number(value)):
        raise VMError(f"tv.atomic_add value must be an integer scalar, got {fv.describe(value)}")
    return Scalar(b.atomic_add(t.tensor, _offsets(offsets, t.ndim, "tv.atomic_add"),
                               fv.to_expr(value, "tv.atomic_add value")))


# ---- shared memory -----------------------------------------------------------------------

def alloc_shared(dtype: Any, shape: Any, layout: Any = None) -> Tile:
    """A shared-memory tile (contents undefined until written)."""
    b = _builder("tv.alloc_shared")
    shape = fv.static_shape(shape, "tv.alloc_shared shape")
    layout = _layout(layout, shape, MemorySpace.SHARED, "tv.alloc_shared")
    return Tile(b.alloc_shared(fv.as_dtype(dtype, "tv.alloc_shared dtype"), shape, layout))


def free_shared(tile: Any) -> None:
    b = _builder("tv.free_shared")
    b.free_shared(_tile(tile, "tv.free_shared", MemorySpace.SHARED).tensor)


def load_shared(src: Any, offsets: Any, shape: Any, layout: Any = None) -> Tile:
    """The register tile `src[offsets + i]` (it must lie inside `src`)."""
    b = _builder("tv.load_shared")
    t = _tile(src, "tv.load_shared source", MemorySpace.SHARED)
    shape = fv.static_shape(shape, "tv.load_shared shape")
    if len(shape) != t.ndim:
        raise VMError(f"tv.load_shared: shape {list(shape)} for a {t.ndim}-d tile")
    offs = _offsets(offsets, t.ndim, "tv.load_shared")
    _check_inside(offs, shape, t.tensor.shape, "tv.load_shared")
    layout = _layout(layout, shape, MemorySpace.REGISTER, "tv.load_shared")
    return Tile(b.load_shared(t.tensor, offs, shape, layout))


def store_shared(dst: Any, value: Any, offsets: Any = None) -> None:
    """`dst[offsets + i] = value[i]` (offsets default to 0)."""
    b = _builder("tv.store_shared")
    t = _tile(dst, "tv.store_shared destination", MemorySpace.SHARED)
    v = _register(value, "tv.store_shared value")
    if v.ndim != t.ndim:
        raise VMError(f"tv.store_shared: a {v.ndim}-d tile into a {t.ndim}-d tile")
    offs = _offsets([0] * t.ndim if offsets is None else offsets, t.ndim, "tv.store_shared")
    _check_inside(offs, v.tensor.type.static_shape, t.tensor.shape, "tv.store_shared")
    b.store_shared(t.tensor, v.tensor, offs)


def copy_async(dst: Any, src: Any, offsets: Any, multicast: bool = False) -> None:
    """Start copying the global tile `src[offsets + i]` (i over `dst`'s shape) into `dst`.

    `multicast=True` (with `tv.cluster(n)` and `tv.producer_warp()`): the blocks of a
    cluster all issue this copy with the same `src` and `offsets`, and the tile is read
    once for all of them; a block's `dst` receives the whole tile, as without it."""
    b = _builder("tv.copy_async")
    d = _tile(dst, "tv.copy_async destination", MemorySpace.SHARED)
    s = _tile(src, "tv.copy_async source", MemorySpace.GLOBAL)
    if d.ndim != s.ndim:
        raise VMError(f"tv.copy_async: a {s.ndim}-d global tensor into a {d.ndim}-d tile")
    if not isinstance(multicast, bool):
        raise VMError(f"tv.copy_async(multicast=...) takes a bool, got "
                      f"{fv.describe(multicast)}")
    if multicast and (b.cluster == 1 or not b.producer_warps):
        raise VMError("tv.copy_async(multicast=True) needs tv.cluster(n) and "
                      "tv.producer_warp() first (the cluster's producer warps issue it)")
    b.copy_async(d.tensor, s.tensor, _offsets(offsets, s.ndim, "tv.copy_async"), multicast)


def copy_async_commit() -> None:
    _builder("tv.copy_async_commit").copy_async_commit()


def copy_async_wait(n: int = 0) -> None:
    b = _builder("tv.copy_async_wait")
    n = fv.static_int(n, "tv.copy_async_wait n")
    if n < 0:
        raise VMError(f"tv.copy_async_wait n must be >= 0, got {n}")
    b.copy_async_wait(n)


def sync() -> None:
    _builder("tv.sync").sync()


# ---- register tiles ----------------------------------------------------------------------

def full(shape: Any, value: Any, dtype: Any = None, layout: Any = None) -> Tile:
    """A register tile with every element `value` (a number or a runtime scalar)."""
    b = _builder("tv.full")
    shape = fv.static_shape(shape, "tv.full shape")
    if isinstance(value, Tile) or not (isinstance(value, Scalar) or fv.is_number(value)):
        raise VMError(f"tv.full value must be a scalar, got {fv.describe(value)}")
    if dtype is None:
        dtype = value.dtype if isinstance(value, Scalar) else fv.number_expr(value).dtype
    dtype = fv.as_dtype(dtype, "tv.full dtype")
    expr = value.expr if isinstance(value, Scalar) else fv.number_expr(value, dtype)
    layout = _layout(layout, shape, MemorySpace.REGISTER, "tv.full")
    return Tile(b.full(expr, dtype, shape, layout))


def zeros(shape: Any, dtype: Any = f32, layout: Any = None) -> Tile:
    return full(shape, 0, dtype, layout)


def view(x: Any, dtype: Any, shape: Any, layout: Any) -> Tile:
    """Reinterpret the bits each thread holds as `dtype` elements under `layout`
    (legal iff the bits per thread are preserved)."""
    b = _builder("tv.view")
    t = _register(x, "tv.view")
    dtype = fv.as_dtype(dtype, "tv.view dtype")
    shape = fv.static_shape(shape, "tv.view shape")
    if layout is None:
        raise VMError("tv.view needs the layout of the result (what a view means depends on "
                      "which thread holds which bits)")
    layout = _layout(layout, shape, MemorySpace.REGISTER, "tv.view")
    src = t.layout
    if isinstance(src, RegisterLayout):
        before, after = src.local_size * t.dtype.bits, layout.local_size * dtype.bits
        if before != after:
            raise VMError(f"tv.view changes the bits each thread holds ({before} -> {after}): "
                          f"{src.local_size} x {t.dtype} vs {layout.local_size} x {dtype}")
    return Tile(b.view(t.tensor, dtype, shape, layout))


def cast(x: Any, dtype: Any, layout: Any = None, *, exponent: int = 0) -> Any:
    """Convert a tile's elements (round to nearest even, saturating) or a scalar. With
    `exponent`, 1..8-bit codes convert to `value * 2^exponent` (a float `dtype`): where
    it cancels the power of two of a low-bit float's conversion rule, the conversion
    needs no float operation, and the kernel applies 2^-exponent later (e.g. to a scale
    in f32)."""
    target = fv.as_dtype(dtype, "tv.cast dtype")
    if isinstance(x, Tile):
        t = _register(x, "tv.cast")
        layout = _layout(layout, t.tensor.type.static_shape, MemorySpace.REGISTER, "tv.cast")
        return t.to(target, layout, exponent=fv.static_int(exponent, "tv.cast exponent"))
    if exponent:
        raise VMError("tv.cast exponent takes a tile of 1..8-bit codes")
    if isinstance(x, Scalar):
        return x.to(target)
    if fv.is_number(x):
        return Scalar(fv.number_expr(x)).to(target)
    raise VMError(f"tv.cast takes a tile or a scalar, got {fv.describe(x)}")


def where(cond: Any, x: Any, y: Any) -> Any:
    """`x` where `cond` holds, else `y`, elementwise (scalars broadcast). With a runtime
    scalar condition and scalar values, a scalar select."""
    for v in (x, y):
        if not isinstance(v, (Tile, Scalar)) and not fv.is_number(v):
            raise VMError(f"tv.where values must be tiles or scalars, got {fv.describe(v)}")
    tiles = [v for v in (cond, x, y) if isinstance(v, Tile)]
    if not tiles:
        if isinstance(cond, Scalar):
            return Scalar(Select(fv.to_bool_expr(cond), fv.to_expr(x), fv.to_expr(y)))
        return x if cond else y
    b = _builder("tv.where")
    for v in tiles:
        v.require_register("tv.where")
    values = [v for v in (x, y) if isinstance(v, Tile)]
    if len(values) == 2 and values[0].dtype != values[1].dtype:
        raise VMError(f"tv.where values have different dtypes ({values[0].dtype} and "
                      f"{values[1].dtype}); convert one with .to(dtype)")
    shape = fv.broadcast_shapes([v.tensor.type.static_shape for v in tiles])
    if isinstance(cond, Tile):
        if cond.dtype != BOOL:
            raise VMError(f"tv.where condition must be a bool tile (a comparison), got "
                          f"{cond.dtype}")
        cond_t = cond.tensor
    else:
        cond_t = b.full(fv.to_bool_expr(cond), BOOL, shape)
    args = [v.tensor if isinstance(v, Tile) else fv.to_expr(v) for v in (x, y)]
    return Tile(b.where(cond_t, *args))


def dot(a: Any, b: Any, c: Any = None, *, layout: Any = None) -> Tile:
    """`a @ b + c` (c defaults to f32 zeros): products and sums in f32.

    `b` may be a whole shared tile instead of a register tile: the tensor cores then read
    it from shared memory themselves (`wgmma` on sm_90a; see docs/language.md), and so
    may `a` when `b` is one."""
    builder = _builder("tv.dot")
    shared_b = isinstance(b, Tile) and b.space is MemorySpace.SHARED
    if shared_b and isinstance(a, Tile) and a.space is MemorySpace.SHARED:
        ta = a
    else:  # (a shared a needs a shared b: the tensor cores read both, or neither)
        ta = _register(a, "tv.dot a (with a register b)" if isinstance(a, Tile) and
                       a.space is MemorySpace.SHARED else "tv.dot a")
    if shared_b:
        tb = b
    else:
        tb = _register(b, "tv.dot b (a register or shared tile)")
    if ta.ndim != 2 or tb.ndim != 2:
        raise VMError(f"tv.dot multiplies 2-d tiles, got shapes {list(ta.shape)} and "
                      f"{list(tb.shape)}")
    (m, k), (k2, n) = ta.shape, tb.shape
    if k != k2:
        raise VMError(f"tv.dot: shapes {[m, k]} and {[k2, n]} do not multiply")
    if c is None:
        c = zeros([m, n], f32)
    tc = _register(c, "tv.dot c")
    if list(tc.shape) != [m, n]:
        raise VMError(f"tv.dot: the accumulator has shape {list(tc.shape)}, expected {[m, n]}")
    layout = _layout(layout, (m, n), MemorySpace.REGISTER, "tv.dot")
    return Tile(builder.dot(ta.tensor, tb.tensor, tc.tensor, layout))


def annotate_layout(x: Any, layout: Any) -> Any:
    """Ask layout inference to give `x` this layout; returns `x`."""
    b = _builder("tv.annotate_layout")
    if not isinstance(x, Tile) or x.space is MemorySpace.GLOBAL:
        raise VMError(f"tv.annotate_layout takes a register or shared tile, got "
                      f"{fv.describe(x)}")
    if layout is None:
        raise VMError("tv.annotate_layout needs a layout")
    layout = _layout(layout, x.tensor.type.static_shape, x.space, "tv.annotate_layout")
    b.annotate_layout(x.tensor, layout)
    return x


def print(*args: Any) -> None:
    """Debug print (block 0): `tv.print(value)` or `tv.print("message", value)`."""
    b = _builder("tv.print")
    if len(args) == 2 and isinstance(args[0], str):
        message, value = args
    elif len(args) == 1:
        message, value = "", args[0]
    else:
        raise VMError("tv.print takes a value, or a message and a value")
    if isinstance(value, Tile):
        b.print(value.tensor, message)
    else:
        b.print(fv.to_expr(value, "tv.print value"), message)
