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
Global memory is not race-checked (blocks run one after another).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from tilevm.dtypes import DataType, DTypeError, decode
from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.evaluate import evaluate
from tilevm.ir.expr import (
    Expr,
    Var,
    free_vars,
)
from tilevm.ir.stmt import AssignVar, For, If, Let, Program, Seq, cluster_grid_problem
from tilevm.ir.types import MemorySpace, Pointer, Tensor
from tilevm.layouts.errors import LayoutError
from tilevm.layouts.register_bits import check_view
from tilevm.layouts.register_layout import RegisterLayout
from tilevm.layouts.shared_layout import SharedLayout, row_major
from tilevm.vm.interp_memory import (
    NONE,
    UNKNOWN,
    SharedAlloc,
    combine,
    read_codes,
    write_codes,
)
from tilevm.vm.interp_values import (
    array_dtype,
    check_register_dtype,
    convert_scalar,
    decode_codes,
    elementwise,
    from_host,
    plain_nan,
    round_to,
    to_codes,
    to_host,
)

__all__ = ["run", "Interpreter", "array_dtype", "to_host", "from_host"]


def run(program: Program, args: Sequence[Any], *, check_races: bool = True,
        check_uninitialized: bool = True) -> None:
    """Run `program` over its whole grid with `args` (see the module docstring for their
    formats), mutating the argument arrays in place. Every violation of the VM's rules
    is a `VMError` naming the instruction and its source line."""
    Interpreter(program, check_races=check_races,
                check_uninitialized=check_uninitialized).run(args)


# ---- helpers -----------------------------------------------------------------------------

def _format_instruction(inst: ins.Instruction) -> str:
    try:
        from tilevm.ir.printer import format_instruction

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


@functools.lru_cache(maxsize=512)
def _owner_pairs(layout: RegisterLayout | None, shape: tuple[int, ...]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(thread, flat element index) for every (thread, local) slot of `layout` over a tile
    of `shape`; without a layout, every element once with the UNKNOWN thread."""
    size = math.prod(shape)
    if layout is None:
        return np.full(size, UNKNOWN, dtype=np.int64), np.arange(size, dtype=np.int64)
    table = layout.table()
    threads = np.repeat(np.arange(table.shape[0], dtype=np.int64), table.shape[1])
    if not shape:
        return threads, np.zeros(threads.size, dtype=np.int64)
    coords = tuple(table[..., d].reshape(-1) for d in range(len(shape)))
    return threads, np.ravel_multi_index(coords, shape).astype(np.int64)


@functools.lru_cache(maxsize=512)
def _owner_matrix(layout: RegisterLayout, shape: tuple[int, ...]) -> np.ndarray:
    """`[element, r]`: the `replication` threads that hold each (row-major) element."""
    threads, flat = _owner_pairs(layout, shape)
    order = np.argsort(flat, kind="stable")
    return threads[order].reshape(math.prod(shape), -1)


@functools.lru_cache(maxsize=512)
def _table(layout: RegisterLayout) -> np.ndarray:
    return layout.table()


@dataclass
class _Buffer:
    """A pointer argument: the user's array and its bytes."""

    param: Pointer
    array: np.ndarray
    mem: np.ndarray  # flat uint8 view of `array`

    @property
    def bits(self) -> int:
        return self.mem.size * 8


@dataclass
class _GlobalView:
    tensor: Tensor
    buffer: _Buffer
    dtype: DataType
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int


@dataclass
class _Copy:
    """One issued copy_async, for the race checker."""

    alloc: SharedAlloc
    units: np.ndarray
    site: int


# ---- the interpreter ---------------------------------------------------------------------

class Interpreter:
    """Runs one program; `run(args)` may be called repeatedly."""

    def __init__(self, program: Program, *, check_races: bool = True,
                 check_uninitialized: bool = True) -> None:
        if not isinstance(program, Program):
            raise VMError(f"run() needs a Program, got {type(program).__name__}")
        self.program = program
        self.check_races = check_races
        self.check_uninitialized = check_uninitialized
        self.num_threads = program.num_threads
        self._sites: list[ins.Instruction] = []
        self._site_index: dict[int, int] = {}
        self._inst: ins.Instruction | None = None

    # ---- entry ------------------------------------------------------------------------
    def run(self, args: Sequence[Any]) -> None:
        self._bind(args)
        grid = self._grid()
        for z in range(grid[2]):
            for y in range(grid[1]):
                for x in range(grid[0]):
                    self._run_block((x, y, z))

    def _run_block(self, block: tuple[int, int, int]) -> None:
        self.block = block
        self.scalars: dict[Var, int | float] = dict(self.param_scalars)
        self.values: dict[str, Any] = {}
        self.epoch = 0
        self.copies: list[_Copy] = []
        self.uncommitted: list[int] = []
        self.groups: list[list[int]] = []
        self._stmt(self.program.body)

    # ---- arguments and grid -------------------------------------------------------------
    def _bind(self, args: Sequence[Any]) -> None:
        params = self.program.params
        if isinstance(args, (str, bytes, np.ndarray)) or not isinstance(args, Sequence):
            raise VMError(f"kernel {self.program.name}: arguments must be a sequence (list or "
                          f"tuple), got {type(args).__name__}")
        if len(args) != len(params):
            names = ", ".join(str(p) for p in params)
            raise VMError(f"kernel {self.program.name} takes {len(params)} argument(s) "
                          f"({names}), got {len(args)}")
        self.buffers: dict[Pointer, _Buffer] = {}
        self.param_scalars: dict[Var, int | float] = {}
        for i, (param, arg) in enumerate(zip(params, args)):
            if isinstance(param, Pointer):
                self.buffers[param] = self._bind_pointer(i, param, arg)
            elif isinstance(param, Var):
                self.param_scalars[param] = self._bind_scalar(i, param, arg)
            else:
                raise VMError(f"parameter {i} of kernel {self.program.name} is neither a "
                              f"pointer nor a scalar: {param!r}")

    def _bind_pointer(self, i: int, param: Pointer, arg: Any) -> _Buffer:
        what = f"argument {i} ({param.name}: {param.type})"
        dtype = param.type.dtype
        want = array_dtype(dtype)
        if not isinstance(arg, np.ndarray):
            raise VMError(f"{what} must be a numpy array of {want}, got {type(arg).__name__}")
        if arg.dtype != want:
            how = ("densely packed bytes" if dtype.bits < 8 else
                   "codes" if want.kind == "u" and dtype.is_float else "values")
            raise VMError(f"{what} must be a numpy array of {want} ({dtype} {how}), "
                          f"got dtype {arg.dtype}")
        if not arg.flags.c_contiguous:
            raise VMError(f"{what} must be C-contiguous (use np.ascontiguousarray)")
        if arg.dtype.byteorder == ">":
            raise VMError(f"{what} must be little-endian")
        return _Buffer(param, arg, arg.reshape(-1).view(np.uint8))

    def _bind_scalar(self, i: int, param: Var, arg: Any) -> int | float:
        what = f"argument {i} ({param.name}: {param.dtype})"
        dtype = param.dtype
        if isinstance(arg, np.ndarray) and arg.ndim == 0:
            arg = arg.item()
        if isinstance(arg, np.generic):
            arg = arg.item()
        if dtype.is_float:
            if isinstance(arg, bool) or not isinstance(arg, (int, float)):
                raise VMError(f"{what} must be a number, got {type(arg).__name__}")
            return convert_scalar(float(arg), dtype)
        if isinstance(arg, bool):
            arg = int(arg)
        if not isinstance(arg, int):
            raise VMError(f"{what} must be an int, got {type(arg).__name__} {arg!r}")
        if not dtype.min_exact <= arg <= dtype.max_exact:
            raise VMError(f"{what}: {arg} is out of range for {dtype} "
                          f"[{int(dtype.min_exact)}, {int(dtype.max_exact)}]")
        return arg

    def _grid(self) -> tuple[int, int, int]:
        grid = self.program.grid
        if not 1 <= len(grid) <= 3:
            raise VMError(f"kernel {self.program.name}: the grid has {len(grid)} dimensions "
                          "(1 to 3 allowed)")
        self.block = None  # type: ignore[assignment]  # no block index in the grid
        self.scalars = dict(self.param_scalars)
        dims = []
        for axis, e in enumerate(grid):
            try:
                n = self._eval(e)
            except VMError as exc:
                raise VMError(f"grid dimension {axis} ({e}): {exc.message}") from None
            if not isinstance(n, int) or n < 0:
                raise VMError(f"kernel {self.program.name}: grid dimension {axis} ({e}) is "
                              f"{n!r}, not a non-negative integer")
            dims.append(n)
        problem = cluster_grid_problem(self.program.cluster, grid[0], dims[0])
        if problem:  # as the launch refuses it (runtime.Signature.grid_of)
            raise VMError(f"kernel {self.program.name} {problem}")
        return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]

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

    # ---- scalar expressions -------------------------------------------------------------
    def _eval(self, e: Expr | int | float) -> int | float:
        return evaluate(e, self._scalar, self.block)

    def _scalar(self, var: Var) -> int | float:
        try:
            return self.scalars[var]
        except KeyError:
            raise VMError(f"scalar {var.name} ({var.dtype}) is not defined here") from None

    def _eval_int(self, e: Expr | int, what: str) -> int:
        v = self._eval(e)
        if not isinstance(v, int):
            raise VMError(f"{what} ({e}) must be an integer, got {v!r}")
        return v

    def _eval_offsets(self, offsets: Sequence[Expr], ndim: int, what: str) -> np.ndarray:
        if len(offsets) != ndim:
            raise VMError(f"{what} has {len(offsets)} offset(s) for {ndim} dimension(s)")
        return np.array([self._eval_int(o, f"offset {d}") for d, o in enumerate(offsets)],
                        dtype=np.int64).reshape(ndim)

    # ---- tensor values ------------------------------------------------------------------
    def _fail(self, message: str) -> NoReturn:
        raise VMError(message)

    def _site(self, inst: ins.Instruction) -> int:
        key = id(inst)
        if key not in self._site_index:
            self._site_index[key] = len(self._sites)
            self._sites.append(inst)
        return self._site_index[key]

    def _loc(self, site: int) -> str:
        loc = self._sites[site].loc
        return str(loc) if loc is not None else "<no source location>"

    def _where(self, site: int) -> str:
        return f"{self._loc(site)} ({self._sites[site].opname})"

    def _reg(self, t: Tensor) -> np.ndarray:
        if not isinstance(t, Tensor) or t.space is not MemorySpace.REGISTER:
            self._fail(f"{t} must be a register tensor, got "
                       f"{t.type if isinstance(t, Tensor) else type(t).__name__}")
        value = self.values.get(t.name)
        if value is None:
            self._fail(f"register tensor {t} is used before it is defined")
        return value

    def _operand(self, x: Tensor | Expr) -> tuple[np.ndarray, DataType]:
        if isinstance(x, Tensor):
            return self._reg(x), x.dtype
        v = self._eval(x)
        return np.asarray(float(v), dtype=np.float64), x.dtype

    def _register_layout(self, t: Tensor) -> RegisterLayout | None:
        layout = t.layout
        if layout is None:
            return None
        if not isinstance(layout, RegisterLayout):
            self._fail(f"register tensor {t} has a layout of type {type(layout).__name__}, "
                       "not a RegisterLayout")
        if layout.shape != t.type.static_shape:
            self._fail(f"register tensor {t} of shape {t.type.static_shape} has a layout of "
                       f"shape {layout.shape}: {layout}")
        if layout.num_threads > self.num_threads:
            self._fail(f"register tensor {t}: its layout {layout} spreads over "
                       f"{layout.num_threads} threads, the block has {self.num_threads}")
        return layout

    def _set(self, out: Tensor, values: np.ndarray) -> None:
        """Define the register tensor `out`; `values` are already rounded to its dtype."""
        if out.space is not MemorySpace.REGISTER:
            self._fail(f"{out} must be a register tensor, got {out.type}")
        shape = out.type.static_shape
        check_register_dtype(out.dtype, str(out))
        self._register_layout(out)
        values = np.asarray(values, dtype=np.float64)
        if values.shape != shape:
            try:
                values = np.broadcast_to(values, shape) if values.ndim == 0 else values
            except ValueError:
                pass
            if values.shape != shape:
                self._fail(f"the result has shape {values.shape}, but {out} is declared with "
                           f"shape {shape}")
        self.values[out.name] = np.array(values, dtype=np.float64)

    def _global(self, t: Tensor) -> _GlobalView:
        view = self.values.get(t.name) if isinstance(t, Tensor) else None
        if not isinstance(view, _GlobalView):
            if isinstance(t, Tensor) and t.space is MemorySpace.GLOBAL:
                self._fail(f"global view {t} is used before its global_view instruction")
            self._fail(f"{t} must be a global tensor")
        return view

    def _shared(self, t: Tensor) -> SharedAlloc:
        alloc = self.values.get(t.name) if isinstance(t, Tensor) else None
        if not isinstance(alloc, SharedAlloc):
            if isinstance(t, Tensor) and t.space is MemorySpace.SHARED:
                self._fail(f"shared tensor {t} is used before its alloc_shared")
            self._fail(f"{t} must be a shared tensor")
        if alloc.freed_site is not None:
            self._fail(f"shared tensor {t} is used after free_shared at "
                       f"{self._where(alloc.freed_site)}")
        return alloc

    # ---- global memory ------------------------------------------------------------------
    def _global_elements(self, view: _GlobalView, offsets: np.ndarray,
                         tile: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(mask of tile elements inside the view's shape, their bit addresses) over the
        row-major flattened tile `offsets + i`."""
        ndim = len(view.shape)
        if len(tile) != ndim:
            self._fail(f"a tile of rank {len(tile)} accesses {view.tensor}, of rank {ndim}")
        n = math.prod(tile)
        idx = np.indices(tile, dtype=np.int64).reshape(ndim, n) + offsets[:, None]
        shape = np.array(view.shape, dtype=np.int64)[:, None]
        mask = np.all((idx >= 0) & (idx < shape), axis=0)
        strides = np.array(view.strides, dtype=np.int64)[:, None]
        element = view.offset + (idx * strides).sum(axis=0)
        b = view.dtype.bits
        outside = mask & ((element < 0) | ((element + 1) * b > view.buffer.bits))
        if outside.any():
            i = int(np.argmax(outside))
            coord = tuple(int(c) for c in idx[:, i])
            self._fail(f"{view.tensor}{list(coord)} is inside the view's shape {view.shape} "
                       f"but at element {int(element[i])} of argument "
                       f"{view.buffer.param.name}, outside its buffer "
                       f"({view.buffer.bits // b} elements of {view.dtype})")
        return mask, element * b

    def exec_global_view(self, inst: ins.GlobalView) -> None:
        """`out` views global memory at `ptr + offset` with `out`'s shape and `strides`."""
        out = inst.out
        if out.space is not MemorySpace.GLOBAL:
            self._fail(f"global_view must produce a global tensor, got {out.type}")
        buffer = self.buffers.get(inst.ptr)
        if buffer is None:
            self._fail(f"{inst.ptr} is not a pointer parameter of kernel {self.program.name}")
        shape = tuple(self._eval_int(s, f"extent {d}") for d, s in enumerate(out.shape))
        if any(s < 0 for s in shape):
            self._fail(f"global view {out} has a negative extent: shape {shape}")
        if len(inst.strides) != len(shape):
            self._fail(f"global view {out} has {len(shape)} dimension(s) but "
                       f"{len(inst.strides)} stride(s)")
        strides = tuple(self._eval_int(s, f"stride {d}") for d, s in enumerate(inst.strides))
        offset = self._eval_int(inst.offset, "offset")
        view = _GlobalView(out, buffer, out.dtype, shape, strides, offset)
        if all(s > 0 for s in shape):  # the view's footprint must lie in the buffer
            low = offset + sum(min(0, (s - 1) * st) for s, st in zip(shape, strides))
            high = offset + sum(max(0, (s - 1) * st) for s, st in zip(shape, strides))
            b = out.dtype.bits
            have = buffer.bits // b
            if low < 0 or high >= have:
                self._fail(f"global view {out} (shape {shape}, strides {strides}, offset "
                           f"{offset}) spans elements {low}..{high} of argument "
                           f"{inst.ptr.name}, which holds {have} element(s) of {out.dtype} "
                           f"({buffer.mem.size} bytes)")
        self.values[out.name] = view

    def exec_load_global(self, inst: ins.LoadGlobal) -> None:
        """`out[i] = src[offsets + i]`; outside `src`'s shape: `other`."""
        view = self._global(inst.src)
        out = inst.out
        tile = out.type.static_shape
        check_register_dtype(out.dtype, str(out))
        offsets = self._eval_offsets(inst.offsets, len(view.shape), "load_global")
        mask, bitpos = self._global_elements(view, offsets, tile)
        values = np.full(mask.size, round_to(float(inst.other), out.dtype), dtype=np.float64)
        got = decode_codes(read_codes(view.buffer.mem, bitpos[mask], view.dtype.bits), view.dtype)
        if view.dtype != out.dtype:
            got = round_to(got, out.dtype)
        values[mask] = got
        self._set(out, values.reshape(tile))

    def exec_store_global(self, inst: ins.StoreGlobal) -> None:
        """`dst[offsets + i] = src[i]` for the elements inside `dst`'s shape."""
        view = self._global(inst.dst)
        buffer = view.buffer
        if buffer.param.type.readonly:
            self._fail(f"store through the readonly pointer {buffer.param.name} "
                       f"({buffer.param.type})")
        if not buffer.array.flags.writeable:
            self._fail(f"the array passed as {buffer.param.name} is not writeable")
        src = self._reg(inst.src)
        offsets = self._eval_offsets(inst.offsets, len(view.shape), "store_global")
        mask, bitpos = self._global_elements(view, offsets, src.shape)
        values = src.reshape(-1)[mask]
        if inst.src.dtype != view.dtype:
            values = round_to(values, view.dtype)
        write_codes(buffer.mem, bitpos[mask], to_codes(values, view.dtype), view.dtype.bits)

    def exec_atomic_add(self, inst: ins.AtomicAdd) -> None:
        """`out = dst[offsets]; dst[offsets] += value` (int32, wrapping). Blocks run one
        after another, so each block's step is atomic and sees every earlier block's."""
        view = self._global(inst.dst)
        buffer = view.buffer
        if buffer.param.type.readonly:
            self._fail(f"atomic_add through the readonly pointer {buffer.param.name} "
                       f"({buffer.param.type})")
        offsets = self._eval_offsets(inst.offsets, len(view.shape), "atomic_add")
        mask, bitpos = self._global_elements(view, offsets, (1,) * len(view.shape))
        if not mask.all():
            self._fail(f"atomic_add: the element at {[int(o) for o in offsets]} is outside "
                       f"{inst.dst} (shape {list(view.shape)})")
        code = int(read_codes(buffer.mem, bitpos, 32)[0])  # two's complement
        added = (code + self._eval_int(inst.value, "value")) % 2**32
        write_codes(buffer.mem, bitpos, np.array([added], dtype=np.uint64), 32)
        self.scalars[inst.out] = code - 2**32 if code >= 2**31 else code

    # ---- shared memory ------------------------------------------------------------------
    def _shared_tile(self, alloc: SharedAlloc, offsets: np.ndarray, tile: tuple[int, ...],
                     op: str) -> np.ndarray:
        """Bit addresses (row-major over the tile) of `alloc[offsets + i]`; the tile must
        lie inside the tensor."""
        shape = alloc.layout.shape
        if len(tile) != len(shape):
            self._fail(f"{op}: a tile of rank {len(tile)} in {alloc.name}, of rank "
                       f"{len(shape)}")
        for d, (o, n, s) in enumerate(zip(offsets, tile, shape)):
            if o < 0 or o + n > s:
                self._fail(f"{op}: the tile [{o}, {o + n}) of dim {d} is outside "
                           f"{alloc.name} (shape {shape})")
        index = tuple(slice(int(o), int(o) + n) for o, n in zip(offsets, tile))
        return alloc.offset_bits[index].reshape(-1)

    def exec_alloc_shared(self, inst: ins.AllocShared) -> None:
        """A fresh allocation of `out`; its contents are undefined until written."""
        out = inst.out
        if out.space is not MemorySpace.SHARED:
            self._fail(f"alloc_shared must produce a shared tensor, got {out.type}")
        shape = out.type.static_shape
        layout = out.layout if out.layout is not None else row_major(shape, out.dtype)
        if not isinstance(layout, SharedLayout):
            self._fail(f"shared tensor {out} has a layout of type {type(layout).__name__}, "
                       "not a SharedLayout")
        if layout.shape != shape or layout.element_bits != out.dtype.bits:
            self._fail(f"shared tensor {out} ({out.dtype}, shape {shape}) has a layout for "
                       f"{layout.element_bits}-bit elements of shape {layout.shape}")
        self.values[out.name] = SharedAlloc(out, layout, self._site(inst))

    def exec_free_shared(self, inst: ins.FreeShared) -> None:
        """End the tensor's lifetime."""
        alloc = self._shared(inst.tensor)
        if self.check_races:
            busy = alloc.inflight[alloc.inflight != NONE]
            if busy.size:
                copy = self.copies[int(busy[0])]
                self._fail(f"free_shared of {alloc.name} while the copy_async at "
                           f"{self._loc(copy.site)} into it is still in flight")
        alloc.freed_site = self._site(inst)

    def exec_load_shared(self, inst: ins.LoadShared) -> None:
        """`out[i] = src[offsets + i]`."""
        alloc = self._shared(inst.src)
        out = inst.out
        tile = out.type.static_shape
        check_register_dtype(out.dtype, str(out))
        offsets = self._eval_offsets(inst.offsets, len(alloc.layout.shape), "load_shared")
        bitpos = self._shared_tile(alloc, offsets, tile, "load_shared")
        layout = self._register_layout(out)
        if self.check_uninitialized:
            self._check_initialized(alloc, bitpos, offsets, tile)
        if self.check_races:
            self._track(alloc, bitpos, layout, offsets, tile, write=False)
        values = decode_codes(read_codes(alloc.mem, bitpos, alloc.bits), alloc.tensor.dtype)
        if alloc.tensor.dtype != out.dtype:
            values = round_to(values, out.dtype)
        self._set(out, values.reshape(tile))

    def _read_whole_shared(self, t: Tensor) -> np.ndarray:
        """The values of a whole shared tile read by the block as one (a `dot` operand the
        tensor cores read in place): any write since the last sync is a race."""
        alloc = self._shared(t)
        tile = t.type.static_shape
        offsets = np.zeros(len(tile), dtype=np.int64)
        bitpos = self._shared_tile(alloc, offsets, tile, t.name)
        if self.check_uninitialized:
            self._check_initialized(alloc, bitpos, offsets, tile)
        if self.check_races:
            self._track(alloc, bitpos, None, offsets, tile, write=False)
        return decode_codes(read_codes(alloc.mem, bitpos, alloc.bits),
                            t.dtype).reshape(tile)

    def exec_store_shared(self, inst: ins.StoreShared) -> None:
        """`dst[offsets + i] = src[i]`."""
        alloc = self._shared(inst.dst)
        src = self._reg(inst.src)
        offsets = self._eval_offsets(inst.offsets, len(alloc.layout.shape), "store_shared")
        bitpos = self._shared_tile(alloc, offsets, src.shape, "store_shared")
        layout = self._register_layout(inst.src)
        if self.check_races:
            self._track(alloc, bitpos, layout, offsets, src.shape, write=True)
        values = src.reshape(-1)
        if inst.src.dtype != alloc.tensor.dtype:
            values = round_to(values, alloc.tensor.dtype)
        write_codes(alloc.mem, bitpos, to_codes(values, alloc.tensor.dtype), alloc.bits)
        alloc.init[alloc.units(bitpos).reshape(-1)] = True

    def exec_copy_async(self, inst: ins.CopyAsync) -> None:
        """Start copying `src[offsets + i]` (0 outside `src`'s shape) into all of `dst`."""
        alloc = self._shared(inst.dst)
        view = self._global(inst.src)
        if view.dtype != alloc.tensor.dtype:
            self._fail(f"copy_async copies bits: {view.tensor} holds {view.dtype}, "
                       f"{alloc.name} holds {alloc.tensor.dtype}")
        tile = alloc.layout.shape
        offsets = self._eval_offsets(inst.offsets, len(view.shape), "copy_async")
        mask, src_bits = self._global_elements(view, offsets, tile)
        codes = np.zeros(mask.size, dtype=np.uint64)  # code 0 is the value 0 of every type
        codes[mask] = read_codes(view.buffer.mem, src_bits[mask], view.dtype.bits)
        bitpos = alloc.offset_bits.reshape(-1)
        if self.check_races:
            units = self._track(alloc, bitpos, None, np.zeros(len(tile), np.int64), tile,
                                write=True)
            record = len(self.copies)
            self.copies.append(_Copy(alloc, units, self._site(inst)))
            self.uncommitted.append(record)
            alloc.inflight[units] = record
        write_codes(alloc.mem, bitpos, codes, alloc.bits)
        alloc.init[alloc.units(bitpos).reshape(-1)] = True

    def exec_copy_async_commit(self, inst: ins.CopyAsyncCommit) -> None:
        """Close the group of copies started since the last commit (possibly empty)."""
        self.groups.append(self.uncommitted)
        self.uncommitted = []

    def exec_copy_async_wait(self, inst: ins.CopyAsyncWait) -> None:
        """Retire committed groups until at most `n` are in flight."""
        if not isinstance(inst.n, int) or inst.n < 0:
            self._fail(f"copy_async_wait needs a non-negative group count, got {inst.n!r}")
        while len(self.groups) > inst.n:
            for record in self.groups.pop(0):
                copy = self.copies[record]
                alloc = copy.alloc
                units = copy.units[alloc.inflight[copy.units] == record]
                alloc.inflight[units] = NONE
                # written by "the block": visible to every thread only after a sync
                alloc.w_epoch[units] = self.epoch
                alloc.w_tmin[units] = UNKNOWN
                alloc.w_tmax[units] = UNKNOWN
                alloc.w_site[units] = copy.site

    def exec_sync(self, inst: ins.Sync) -> None:
        """Block-wide barrier: every earlier shared-memory access happens before every
        later one."""
        self.epoch += 1

    # ---- race and initialization checks -----------------------------------------------
    def _element_name(self, alloc: SharedAlloc, flat: int, offsets: np.ndarray,
                      tile: tuple[int, ...]) -> str:
        coord = np.unravel_index(flat, tile) if tile else ()
        return f"{alloc.name}[{', '.join(str(int(c) + int(o)) for c, o in zip(coord, offsets))}]"

    def _check_initialized(self, alloc: SharedAlloc, bitpos: np.ndarray, offsets: np.ndarray,
                           tile: tuple[int, ...]) -> None:
        fresh = ~alloc.init[alloc.units(bitpos)].all(axis=-1)
        if fresh.any():
            element = self._element_name(alloc, int(np.argmax(fresh)), offsets, tile)
            self._fail(f"{self._inst.opname} reads {element}, which was never written (shared "
                       "memory is undefined until written)")

    def _who(self, thread: int, site: int) -> str:
        if thread >= 0:
            return f"thread {thread}"
        if self._sites[site].opname in ("copy_async", "dot"):
            return f"{self._sites[site].opname} (the whole block)"
        return "an unknown thread (the register tile has no layout)"

    def _track(self, alloc: SharedAlloc, bitpos: np.ndarray, layout: RegisterLayout | None,
               offsets: np.ndarray, tile: tuple[int, ...], *, write: bool) -> np.ndarray:
        """Check one access of the tile at `bitpos` by the owners under `layout` against
        the accesses since the last sync, then record it. Returns the units touched."""
        threads, elems = _owner_pairs(layout, tuple(tile))
        k = alloc.units_per_element
        units = alloc.units(bitpos[elems]).reshape(-1)
        threads = np.repeat(threads, k)
        elems = np.repeat(elems, k)
        site = self._site(self._inst)  # type: ignore[arg-type]
        here = self._where(site)

        def fail(i: int, what: str) -> NoReturn:
            element = self._element_name(alloc, int(elems[i]), offsets, tile)
            self._fail(f"shared-memory race on {element}: {what} without a sync between")

        def conflicts(epoch: np.ndarray, tmin: np.ndarray, tmax: np.ndarray) -> np.ndarray:
            e, lo, hi = epoch[units], tmin[units], tmax[units]
            single = (lo == hi) & (lo >= 0) & (threads >= 0)
            return (e == self.epoch) & ~(single & (lo == threads))

        def other(tmin: np.ndarray, tmax: np.ndarray, u: int, me: int) -> int:
            lo, hi = int(tmin[u]), int(tmax[u])
            return lo if lo != me else hi

        me_name = "copy_async (the whole block)" if self._inst.opname == "copy_async" \
            else None
        busy = alloc.inflight[units] != NONE
        if busy.any():
            i = int(np.argmax(busy))
            copy = self.copies[int(alloc.inflight[units[i]])]
            me = me_name or self._who(int(threads[i]), site)
            element = self._element_name(alloc, int(elems[i]), offsets, tile)
            self._fail(f"shared-memory race on {element}: the copy_async at "
                       f"{self._loc(copy.site)} is still in flight (no copy_async_wait has "
                       f"retired its group) when {me} {'writes' if write else 'reads'} it at "
                       f"{here}")
        raw = conflicts(alloc.w_epoch, alloc.w_tmin, alloc.w_tmax)
        if raw.any() and not write:
            # Replicas of one store write the same value: a thread that is one of the
            # element's writers reads its own value (several writing instructions by
            # different threads would already have been a write-write race).
            cand = np.nonzero(raw & (alloc.w_tmin[units] >= 0) & (threads >= 0))[0]
            if cand.size:
                raw[cand[self._among_writers(alloc, units[cand], threads[cand])]] = False
        if raw.any():
            i = int(np.argmax(raw))
            u, t = int(units[i]), int(threads[i])
            wsite = int(alloc.w_site[u])
            writer = self._who(other(alloc.w_tmin, alloc.w_tmax, u, t), wsite)
            me = me_name or self._who(t, site)
            verb = "written again" if write else "read"
            fail(i, f"written by {writer} at {self._where(wsite)} and {verb} by {me} at {here}")
        if write:
            war = conflicts(alloc.r_epoch, alloc.r_tmin, alloc.r_tmax)
            if war.any():
                i = int(np.argmax(war))
                u, t = int(units[i]), int(threads[i])
                rsite = int(alloc.r_site[u])
                reader = self._who(other(alloc.r_tmin, alloc.r_tmax, u, t), rsite)
                me = me_name or self._who(t, site)
                fail(i, f"read by {reader} at {self._where(rsite)} and written by {me} at "
                        f"{here}")
        epoch, tmin, tmax, where = (
            (alloc.w_epoch, alloc.w_tmin, alloc.w_tmax, alloc.w_site) if write else
            (alloc.r_epoch, alloc.r_tmin, alloc.r_tmax, alloc.r_site))
        touched, lo, hi = combine(units, threads, epoch.size)
        current = epoch[touched] == self.epoch
        tmin[touched] = np.where(current, np.minimum(tmin[touched], lo), lo)
        tmax[touched] = np.where(current, np.maximum(tmax[touched], hi), hi)
        epoch[touched] = self.epoch
        where[touched] = site
        if write:
            alloc.w_elem[units] = elems
        return touched

    def _among_writers(self, alloc: SharedAlloc, units: np.ndarray, threads: np.ndarray
                       ) -> np.ndarray:
        """Whether each thread is one of the owners that wrote its unit (under the register
        layout of the store that wrote it last)."""
        ok = np.zeros(units.size, dtype=bool)
        sites = alloc.w_site[units]
        for s in np.unique(sites):
            inst = self._sites[int(s)]
            src = getattr(inst, "src", None)
            if not isinstance(src, Tensor) or not isinstance(src.layout, RegisterLayout):
                continue
            owners = _owner_matrix(src.layout, src.type.static_shape)
            sel = sites == s
            ok[sel] = (owners[alloc.w_elem[units[sel]]] == threads[sel, None]).any(axis=1)
        return ok

    # ---- register tiles -----------------------------------------------------------------
    def exec_full(self, inst: ins.Full) -> None:
        """Every element = `value` converted to `out`'s dtype."""
        out = inst.out
        check_register_dtype(out.dtype, str(out))
        value = round_to(float(self._eval(inst.value)), out.dtype)
        self._set(out, np.full(out.type.static_shape, float(value)))

    def exec_assign(self, inst: ins.Assign) -> None:
        """Overwrite `dst` with `src` (same shape and dtype)."""
        src = self._reg(inst.src)
        dst = inst.dst
        if dst.type.static_shape != inst.src.type.static_shape or dst.dtype != inst.src.dtype:
            self._fail(f"assign needs one type on both sides: {dst} is {dst.type}, "
                       f"{inst.src} is {inst.src.type}")
        if dst.layout is not None and inst.src.layout is not None and \
                dst.layout != inst.src.layout:
            self._fail(f"assign between different layouts: {dst.layout} and "
                       f"{inst.src.layout}")
        self._set(dst, src)

    def exec_view(self, inst: ins.View) -> None:
        """Each thread's bits of `src` (local element l at bits [l*b, (l+1)*b)) read back
        as `out`'s elements under `out`'s layout."""
        src, out = inst.src, inst.out
        values = self._reg(src)
        check_register_dtype(out.dtype, str(out))
        src_layout, out_layout = self._register_layout(src), self._register_layout(out)
        if src_layout is None or out_layout is None:
            missing = " and ".join(str(t) for t, lay in ((src, src_layout), (out, out_layout))
                                   if lay is None)
            self._fail(f"view needs both layouts; {missing} has none")
        check_view(src_layout, src.dtype.bits, out_layout, out.dtype.bits)
        sb, ob = src.dtype.bits, out.dtype.bits
        src_table = _table(src_layout)
        nthreads, nlocal = src_table.shape[:2]
        flat = _flat_index(src_table, src_layout.shape)
        codes = to_codes(values.reshape(-1), src.dtype).astype(np.uint64)[flat]  # [T, L]
        shifts = np.arange(sb, dtype=np.uint64)
        bits = ((codes[..., None] >> shifts) & np.uint64(1)).reshape(nthreads, nlocal * sb)
        out_table = _table(out_layout)
        out_local = out_table.shape[1]
        grouped = bits.reshape(nthreads, out_local, ob)
        out_codes = (grouped << np.arange(ob, dtype=np.uint64)).sum(axis=-1, dtype=np.uint64)
        out_flat = _flat_index(out_table, out_layout.shape)
        result = np.zeros(math.prod(out_layout.shape), dtype=np.uint64)
        result[out_flat.reshape(-1)] = out_codes.reshape(-1)
        clash = result[out_flat] != out_codes
        if clash.any():
            t, l = (int(x[0]) for x in np.nonzero(clash))
            coord = tuple(int(c) for c in out_table[t, l])
            self._fail(f"view: the replicas of {out}{list(coord)} hold different bits (thread "
                       f"{t} holds {int(out_codes[t, l]):#x}); the source layout does not "
                       "replicate the data the target layout replicates")
        self._set(out, decode_codes(result, out.dtype).reshape(out_layout.shape))

    def exec_cast(self, inst: ins.Cast) -> None:
        """`out[i] = convert(src[i] * 2^exponent)` (RNE, saturation as `dtypes.encode`;
        the product is exact in float64 for the low-bit sources an exponent takes)."""
        src = self._reg(inst.src)
        out = inst.out
        check_register_dtype(out.dtype, str(out))
        if src.shape != out.type.static_shape:
            self._fail(f"cast keeps the shape: {inst.src} has {src.shape}, {out} has "
                       f"{out.type.static_shape}")
        self._set(out, round_to(np.ldexp(src, inst.exponent) if inst.exponent else src,
                                out.dtype))

    def _broadcast(self, arrays: list[np.ndarray], out: Tensor, op: str) -> list[np.ndarray]:
        shape = out.type.static_shape
        try:
            full = np.broadcast_shapes(*(a.shape for a in arrays))
        except ValueError:
            self._fail(f"{op}: operand shapes {[a.shape for a in arrays]} do not broadcast")
        if full != shape:
            self._fail(f"{op}: operands broadcast to shape {full}, but {out} has shape {shape}")
        return [np.broadcast_to(a, shape) for a in arrays]

    def exec_elementwise(self, inst: ins.Elementwise) -> None:
        """`out[i] = op(x[i], ...)`, broadcasting (see `interp_values.elementwise`)."""
        out = inst.out
        check_register_dtype(out.dtype, str(out))
        if inst.op not in ins.UNARY_TENSOR_OPS + ins.BINARY_TENSOR_OPS + ins.TERNARY_TENSOR_OPS:
            self._fail(f"unknown elementwise operation {inst.op!r}")
        if not any(isinstance(a, Tensor) for a in inst.args):
            self._fail("elementwise needs at least one tensor operand")
        operands = [self._operand(a) for a in inst.args]
        arrays = self._broadcast([a for a, _ in operands], out, f"elementwise {inst.op}")
        args = [(a, t) for a, (_, t) in zip(arrays, operands)]
        self._set(out, elementwise(inst.op, args, out.dtype))

    def exec_where(self, inst: ins.Where) -> None:
        """`out[i] = x[i] if cond[i] else y[i]`, converted to `out`'s dtype."""
        out = inst.out
        check_register_dtype(out.dtype, str(out))
        cond = self._reg(inst.cond)
        (x, _), (y, _) = self._operand(inst.x), self._operand(inst.y)
        cond, x, y = self._broadcast([cond, x, y], out, "where")
        self._set(out, round_to(np.where(cond != 0, x, y), out.dtype))

    def exec_reduce(self, inst: ins.Reduce) -> None:
        """`op` over dimension `dim` (float sums in float64, rounded once to `out`)."""
        src = self._reg(inst.src)
        out = inst.out
        check_register_dtype(out.dtype, str(out))
        if not -src.ndim <= inst.dim < src.ndim:
            self._fail(f"reduce dim {inst.dim} is out of range for {inst.src} of rank "
                       f"{src.ndim}")
        if inst.op not in ins.REDUCE_OPS:
            self._fail(f"unknown reduction {inst.op!r} (known: {', '.join(ins.REDUCE_OPS)})")
        dim, keep = inst.dim, inst.keepdim
        if inst.op == "max":
            r = np.max(src, axis=dim, keepdims=keep)
        elif inst.op == "min":
            r = np.min(src, axis=dim, keepdims=keep)
        elif inst.src.dtype.is_integer and out.dtype.is_integer:
            r = elementwise("add", [(np.sum(src.astype(np.int64), axis=dim, keepdims=keep),
                                     out.dtype), (np.zeros(()), out.dtype)], out.dtype)
        else:
            r = np.sum(src, axis=dim, keepdims=keep)
        self._set(out, round_to(plain_nan(r), out.dtype))

    def exec_dot(self, inst: ins.Dot) -> None:
        """`out = a @ b + c` with float32 accumulation (see the module docstring)."""
        a, b = (self._reg(t) if t.space is MemorySpace.REGISTER else
                self._read_whole_shared(t) for t in (inst.a, inst.b))
        c = self._reg(inst.c)
        out = inst.out
        check_register_dtype(out.dtype, str(out))
        if a.ndim != 2 or b.ndim != 2 or c.ndim != 2 or a.shape[1] != b.shape[0] or \
                c.shape != (a.shape[0], b.shape[1]):
            self._fail(f"dot needs a[m, k], b[k, n], c[m, n]; got {a.shape}, {b.shape}, "
                       f"{c.shape}")
        tensors = (inst.a, inst.b, inst.c)
        if out.dtype.is_integer and all(t.dtype.is_integer for t in tensors):
            acc = a.astype(np.int64) @ b.astype(np.int64) + c.astype(np.int64)
            self._set(out, elementwise("add", [(acc, out.dtype), (np.zeros(()), out.dtype)],
                                       out.dtype))
            return
        for t, v in ((inst.a, a), (inst.b, b)):
            if not np.array_equal(v.astype(np.float32).astype(np.float64), v, equal_nan=True):
                self._fail(f"dot input {t} ({t.dtype}) holds values that are not exact in "
                           "float32")
        with np.errstate(all="ignore"):
            acc = np.matmul(a.astype(np.float32), b.astype(np.float32)) + c.astype(np.float32)
        self._set(out, round_to(plain_nan(acc.astype(np.float64)), out.dtype))

    def exec_annotate_layout(self, inst: ins.AnnotateLayout) -> None:
        """No-op at run time; the layout must agree with the tensor's type."""
        t, layout = inst.tensor, inst.layout
        if t.layout is not None and layout is not None and t.layout != layout:
            self._fail(f"annotate_layout asks {t} for {layout}, but its type has {t.layout}")
        shape = getattr(layout, "shape", None)
        if shape is not None and t.space is not MemorySpace.GLOBAL and \
                tuple(shape) != t.type.static_shape:
            self._fail(f"annotate_layout: {layout} has shape {tuple(shape)}, {t} has shape "
                       f"{t.type.static_shape}")

    def exec_print(self, inst: ins.Print) -> None:
        """Print a tensor or scalar (block (0, 0, 0) only) to stdout."""
        if self.block != (0, 0, 0):
            return
        value = inst.value
        if isinstance(value, Tensor):
            if value.space is MemorySpace.REGISTER:
                arr = self._reg(value)
                text = np.array2string(arr.astype(np.int64) if value.dtype.is_integer else arr,
                                       threshold=1 << 16, max_line_width=100)
            elif value.space is MemorySpace.SHARED:
                alloc = self._shared(value)
                vals = decode(read_codes(alloc.mem, alloc.offset_bits.reshape(-1), alloc.bits),
                              value.dtype).reshape(alloc.layout.shape)
                text = np.array2string(vals, threshold=1 << 16, max_line_width=100)
            else:
                view = self._global(value)
                text = f"global view {value} shape={view.shape} strides={view.strides} " \
                       f"offset={view.offset}"
        else:
            text = repr(self._eval(value))
        prefix = f"{inst.message} " if inst.message else ""
        print(f"{prefix}{text}", flush=True)


    def exec_assume(self, inst: ins.Assume) -> None:
        """Check the promised condition; a false one is the program's error."""
        if not self._eval(inst.cond):
            self._fail(f"assume: the condition {inst.cond} does not hold (block "
                       f"{self.block}){_scalar_values(inst.cond, self.scalars)}")


def _scalar_values(cond: Expr, scalars: Mapping[Var, int | float]) -> str:
    """`: N = 17, M = 4` for the scalars a condition reads (those defined here)."""
    known = [f"{v.name} = {scalars[v]}" for v in sorted(free_vars(cond), key=lambda v: v.name)
             if v in scalars]
    return f": {', '.join(known)}" if known else ""


def _flat_index(table: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Row-major flat element index of every (thread, local) entry of a layout table."""
    if not shape:
        return np.zeros(table.shape[:2], dtype=np.int64)
    return np.ravel_multi_index(tuple(table[..., d] for d in range(len(shape))), shape)
