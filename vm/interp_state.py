"""The interpreter's state and what its instruction semantics share: the bound
arguments (pointer buffers, global views), the per-block scalar and tensor values, the
evaluation of expressions and offsets, and error sites. `vm.interpreter` walks the
statements; `vm.interp_exec_memory` and `vm.interp_exec_tiles` give each instruction its
meaning (`exec_<opname>`) on this state.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from tilevm.dtypes import DataType
from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.evaluate import evaluate
from tilevm.ir.expr import Expr, Var
from tilevm.ir.stmt import Program, cluster_grid_problem
from tilevm.ir.types import MemorySpace, Pointer, Tensor
from tilevm.layouts.register_layout import RegisterLayout
from tilevm.vm.interp_memory import SharedAlloc
from tilevm.vm.interp_values import array_dtype, check_register_dtype, convert_scalar

#: The interpreter's work limits (docs/language.md, "Limits"): it runs blocks one after
#: another and loop trips one by one, so a grid or loop a GPU takes in its stride would
#: run for hours here; it refuses them up front instead. Each default is overridden by
#: the argument of `run` or by the environment variable.
WORK_LIMITS: dict[str, tuple[int, str]] = {
    "max_blocks": (2**16, "TILEVM_INTERP_MAX_BLOCKS"),
    "max_loop_trips": (2**20, "TILEVM_INTERP_MAX_LOOP_TRIPS"),
}


def work_limit(name: str, given: int | None) -> int:
    """The limit `name`: `given`, else its environment variable, else the default."""
    default, variable = WORK_LIMITS[name]
    if given is None:
        text = os.environ.get(variable)
        if text is None:
            return default
        try:
            given = int(text)
        except ValueError:
            raise ValueError(f"{variable}={text!r} must be an integer") from None
    if not isinstance(given, int) or isinstance(given, bool) or given < 1:
        raise ValueError(f"{name} must be an int >= 1, got {given!r}")
    return given


def limit_hint(name: str) -> str:
    return (f"raise the limit with run(..., {name}=N) or the environment variable "
            f"{WORK_LIMITS[name][1]}")


@dataclass
class Buffer:
    """A pointer argument: the user's array and its bytes."""

    param: Pointer
    array: np.ndarray
    mem: np.ndarray  # flat uint8 view of `array`

    @property
    def bits(self) -> int:
        return self.mem.size * 8


@dataclass
class GlobalView:
    tensor: Tensor
    buffer: Buffer
    dtype: DataType
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int


@dataclass
class AsyncCopy:
    """One issued copy_async, for the race checker."""

    alloc: SharedAlloc
    units: np.ndarray
    site: int


class InterpreterState:
    """One program's interpreter state; the semantics and the walker subclass it."""

    def __init__(self, program: Program, *, check_races: bool = True,
                 check_uninitialized: bool = True, max_blocks: int | None = None,
                 max_loop_trips: int | None = None) -> None:
        if not isinstance(program, Program):
            raise VMError(f"run() needs a Program, got {type(program).__name__}")
        self.program = program
        self.check_races = check_races
        self.check_uninitialized = check_uninitialized
        self.max_blocks = work_limit("max_blocks", max_blocks)
        self.max_loop_trips = work_limit("max_loop_trips", max_loop_trips)
        self.num_threads = program.num_threads
        self._sites: list[ins.Instruction] = []
        self._site_index: dict[int, int] = {}
        self._inst: ins.Instruction | None = None
        # blocks that wait for each other run under a scheduler, each its own state
        self.scheduler: Any = None  # interp_blocks.BlockScheduler
        self.task: Any = None  # this block's interp_blocks.Task
        self.races: Any = None  # interp_global_races.GlobalRaces of a synchronized run
        # the races' record of each instruction's line, by id: one dict every block's
        # copy of this state shares, so a line is recorded once, not once a block
        self.race_sites: dict[int, int] = {}
        self.block_id = 0  # this block's number in that run

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
        self.buffers: dict[Pointer, Buffer] = {}
        self.param_scalars: dict[Var, int | float] = {}
        for i, (param, arg) in enumerate(zip(params, args)):
            if isinstance(param, Pointer):
                self.buffers[param] = self._bind_pointer(i, param, arg)
            elif isinstance(param, Var):
                self.param_scalars[param] = self._bind_scalar(i, param, arg)
            else:
                raise VMError(f"parameter {i} of kernel {self.program.name} is neither a "
                              f"pointer nor a scalar: {param!r}")

    def _bind_pointer(self, i: int, param: Pointer, arg: Any) -> Buffer:
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
        return Buffer(param, arg, arg.reshape(-1).view(np.uint8))

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
        if problem:  # as the launch refuses it (cuda.validate.grid_of)
            raise VMError(f"kernel {self.program.name} {problem}")
        blocks = math.prod(dims)
        if blocks > self.max_blocks:
            raise VMError(f"kernel {self.program.name}: the grid {tuple(dims)} has {blocks} "
                          f"blocks, more than the interpreter runs ({self.max_blocks}); "
                          f"{limit_hint('max_blocks')}")
        return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]

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

    def _global(self, t: Tensor) -> GlobalView:
        view = self.values.get(t.name) if isinstance(t, Tensor) else None
        if not isinstance(view, GlobalView):
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
