"""The state and helpers every lowering uses: `KernelContext`, the kernel being emitted
(its LLVM module, function and builder, the values of scalars, pointers and register
tiles) and the layout arithmetic that turns a tile into per-thread values. The lowerings
(backend/llvm/lowering/) take a `KernelContext`; the driver (`codegen.KernelCodegen`)
is one, and adds the walk over the program's statements.

How a tile becomes per-thread code: thread `t` holds element `l` of a register tile at
coordinate `layout.global_index(t, l)`, which splits into a thread part and a local
part, `global_index(t, 0) + global_index(0, l)` (every mode adds `digit * stride` to
its dimension, and thread and local digits are disjoint). The thread part is a few
integer ops on `%tid.x` (emitted once per layout); the local part is a constant per
`l`. A register tile is therefore a Python list of LLVM values, one per local index;
tiles that a loop carries (`assign` destinations) and scalar variables live in
`alloca`s, which LLVM's SROA turns back into registers.

Low-bit tiles are packed (pass `lower_bit_packing`): a tile of elements of 8 bits or
fewer (`is_packed`) is held
as the i32 words of the thread's bit string, local `l` at bits `[l*b, (l+1)*b)` (the
order of `layouts.register_bits`, the same as `dtypes.pack`). A `view` between packed
tiles is then free (the same words), a load of packed bytes is a load of words, and
`cast` reads its codes out of the words. `register_values` / `define` unpack / pack for
the lowerings that work on one value per element (LLVM folds the shifts away where the
values come from or go to words anyway); `register_words` / `define_words` give the
words themselves.

"""

from __future__ import annotations

import math
from typing import Any

import llvmlite.ir as ir
import numpy as np

from tilevm.backend.analysis.packing import is_packed
from tilevm.backend.llvm.arith import convert_value, scalar_binary
from tilevm.backend.llvm.bits import extract_bits, from_bits, pack_words, to_bits
from tilevm.backend.llvm.types import I32, I64, llvm_constant
from tilevm.dtypes import DataType, DTypeError, parse
from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.expr import (
    Binary,
    BlockIndex,
    Const,
    Expr,
    ScalarCast,
    Select,
    Unary,
    Var,
    promote,
)
from tilevm.ir.printer import format_instruction
from tilevm.ir.stmt import Program
from tilevm.ir.types import Tensor
from tilevm.layouts import RegisterLayout


class KernelContext:
    """One kernel's emission state (set up by `codegen.KernelCodegen`), and the helpers
    the lowerings call: scalar expressions, special registers, entry-block slots, the
    thread and local parts of a layout, a tile's register values or packed words.

    `wgmma` is the program's `lowering.wgmma.InFlight` (None without wgmma `dot`s),
    `tma` its `lowering.tma.TmaState` (None without TMA copies): the lowerings of those
    families keep their state there."""

    program: Program
    module: ir.Module
    function: ir.Function
    entry: ir.Block
    b: ir.IRBuilder
    tid: ir.Value
    scalars: dict[str, Any]  # Var name -> ir.Value or an alloca (let vars)
    pointers: dict[str, ir.Value]
    tensors: dict[str, Any]
    carried: set[str]
    wgmma: Any
    tma: Any
    in_producer: bool  # lowering the producer warp's body
    inst: ins.Instruction | None
    _thread_parts: dict[RegisterLayout, list[ir.Value]]
    _broadcast_maps: dict[tuple, list[int]]

    def fail(self, message: str) -> VMError:
        inst = self.inst
        return VMError(message, format_instruction(inst) if inst else None,
                       inst.loc if inst else None)

    # ---- scalar expressions --------------------------------------------------------------
    def expr(self, e: Expr, as_dtype: DataType | None = None) -> ir.Value:
        value = self._expr(e)
        if as_dtype is not None and as_dtype != e.dtype:
            value = convert_value(self.b, value, e.dtype, as_dtype)
        return value

    def _expr(self, e: Expr) -> ir.Value:
        b = self.b
        if isinstance(e, Const):
            return self.constant(e.value, e.dtype)
        if isinstance(e, Var):
            value = self.scalars[e.name]
            return b.load(value) if isinstance(value, ir.AllocaInstr) else value
        if isinstance(e, BlockIndex):
            return self.sreg(f"ctaid.{'xyz'[e.axis]}")
        if isinstance(e, ScalarCast):
            return convert_value(self.b, self._expr(e.operand), e.operand.dtype, e.dtype)
        if isinstance(e, Select):
            return b.select(self._expr(e.cond), self.expr(e.if_true, e.dtype),
                            self.expr(e.if_false, e.dtype))
        if isinstance(e, Unary):
            x = self._expr(e.operand)
            if e.op == "not":
                return b.not_(x)
            if e.op == "~":
                return b.not_(x)
            return b.fneg(x) if e.operand.dtype.is_float else b.neg(x)
        if isinstance(e, Binary):
            return self._binary(e)
        raise self.fail(f"cannot lower expression {e!r}")

    def _binary(self, e: Binary) -> ir.Value:
        b, op = self.b, e.op
        if op in ("and", "or"):
            x, y = self._expr(e.lhs), self._expr(e.rhs)
            return b.and_(x, y) if op == "and" else b.or_(x, y)
        operand = e.dtype if op not in ("<", "<=", "==", "!=", ">", ">=") else \
            promote(e.lhs.dtype, e.rhs.dtype)
        x, y = self.expr(e.lhs, operand), self.expr(e.rhs, operand)
        return scalar_binary(b, op, x, y, operand)

    # ---- helpers ----------------------------------------------------------------------------
    def sreg(self, name: str) -> ir.Value:
        """The special register `%name` (`llvm.nvvm.read.ptx.sreg.*`)."""
        fn = self.module.globals.get(f"llvm.nvvm.read.ptx.sreg.{name}")
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(I32, []),
                             f"llvm.nvvm.read.ptx.sreg.{name}")
        return self.b.call(fn, [])

    def entry_alloca(self, ty: ir.Type, name: str) -> ir.AllocaInstr:
        """A stack slot in the entry block (mem2reg makes it SSA values and phis)."""
        with self.b.goto_block(self.entry):
            if self.entry.instructions:
                self.b.position_before(self.entry.instructions[0])
            return self.b.alloca(ty, name=name)

    def thread_part(self, layout: RegisterLayout) -> list[ir.Value]:
        """`layout.global_index(tid, 0)`: the thread's coordinate offset, as i64 values."""
        if layout in self._thread_parts:
            return self._thread_parts[layout]
        with self.b.goto_block(self.entry):
            if self.entry.is_terminated:  # computed once, where it dominates every use
                self.b.position_before(self.entry.terminator)
            coords = [ir.Constant(I64, 0)] * layout.ndim
            mode_dims = layout.mode_dims
            dim_stride = _dim_strides(layout)
            radix = 1
            for entry in reversed(layout.spatial_modes):
                size = -entry if entry < 0 else layout.mode_shape[entry]
                if entry >= 0:
                    digit = self.b.urem(self.b.udiv(self.tid, ir.Constant(I32, radix)),
                                        ir.Constant(I32, size))
                    d = mode_dims[entry]
                    term = self.b.mul(self.b.zext(digit, I64), ir.Constant(I64, dim_stride[entry]))
                    coords[d] = self.b.add(coords[d], term)
                radix *= size
        self._thread_parts[layout] = coords
        return coords

    def local_parts(self, layout: RegisterLayout) -> list[tuple[int, ...]]:
        return [layout.global_index(0, l) for l in range(layout.local_size)]

    def register_values(self, tensor: Tensor) -> list[ir.Value]:
        """One LLVM value per local element (`types.llvm_type`; packed tiles unpacked)."""
        if not is_packed(tensor.dtype):
            return self._stored(tensor)
        words, bits = self._stored(tensor), tensor.dtype.bits
        return [from_bits(self.b, extract_bits(self.b, words, l * bits, bits), tensor.dtype)
                for l in range(self.layout_of(tensor).local_size)]

    def register_words(self, tensor: Tensor) -> list[ir.Value]:
        """The i32 words of a packed tile (see the module docstring)."""
        assert is_packed(tensor.dtype), tensor
        return self._stored(tensor)

    def define(self, tensor: Tensor, values: list[ir.Value]) -> None:
        """Give `tensor` its values, one per local element (packed for low-bit tiles)."""
        if is_packed(tensor.dtype):
            values = pack_words(self.b, [to_bits(self.b, v, tensor.dtype) for v in values],
                                tensor.dtype.bits)
        self._store(tensor, values)

    def define_words(self, tensor: Tensor, words: list[ir.Value]) -> None:
        """Give a packed tile its i32 words."""
        assert is_packed(tensor.dtype), tensor
        self._store(tensor, words)

    def _stored(self, tensor: Tensor) -> list[ir.Value]:
        value = self.tensors[tensor.name]
        values = [self.b.load(slot) for slot in value] if tensor.name in self.carried \
            else value
        if self.wgmma is not None:  # (results of wgmmas in flight: wait first)
            waited = self.wgmma.read(self, tensor, values)
            if waited is not values:
                if tensor.name in self.carried:
                    for slot, v in zip(value, waited):
                        self.b.store(v, slot)
                else:
                    self.tensors[tensor.name] = waited
            values = waited
        return values

    def _store(self, tensor: Tensor, values: list[ir.Value]) -> None:
        if tensor.name in self.carried:
            slots = [self.entry_alloca(v.type, f"{tensor.name}.{i}")
                     for i, v in enumerate(values)]
            for slot, v in zip(slots, values):
                self.b.store(v, slot)
            self.tensors[tensor.name] = slots
        else:
            self.tensors[tensor.name] = values

    def layout_of(self, tensor: Tensor) -> RegisterLayout:
        if not isinstance(tensor.layout, RegisterLayout):
            raise self.fail(f"%{tensor.name} has no register layout (run layout inference)")
        return tensor.layout

    def operand_values(self, operand: Tensor | Expr, out: Tensor) -> list[ir.Value]:
        """An operand's value for each of `out`'s local elements (broadcasting)."""
        if not isinstance(operand, Tensor):
            value = self.expr(operand, operand.dtype)
            return [value] * self.layout_of(out).local_size
        values = self.register_values(operand)
        if operand.type.shape == out.type.shape and operand.layout == out.layout:
            return values
        return [values[i] for i in self.broadcast_map(operand, out)]

    def broadcast_map(self, operand: Tensor, out: Tensor) -> list[int]:
        """For each local index of `out`, the local index of `operand` holding the
        broadcast element, the same in every thread (else the layouts are incompatible)."""
        src, dst = self.layout_of(operand), self.layout_of(out)
        oshape = operand.type.static_shape
        key = (src, dst, oshape)
        if key not in self._broadcast_maps:
            mapping = _broadcast_map(src, dst, oshape)
            if mapping == "not held":
                raise self.fail(f"%{operand.name} (layout {src}) is not held by the threads "
                                f"that need it for %{out.name} (layout {dst}); layout "
                                "conversion is not supported by the GPU backend yet")
            if mapping == "differs":
                raise self.fail(f"%{operand.name} broadcasts to %{out.name} differently in "
                                "different threads; layout conversion is not supported yet")
            self._broadcast_maps[key] = mapping
        return self._broadcast_maps[key]

    def i64(self, e: Expr | int) -> ir.Value:
        if isinstance(e, int):
            return ir.Constant(I64, e)
        return convert_value(self.b, self._expr(e), e.dtype, _INT64)

    def constant(self, value: int | float, dtype: DataType) -> ir.Value:
        """A literal of `dtype` (`types.llvm_constant`); one it cannot hold is a `VMError`
        at the instruction's line."""
        try:
            return llvm_constant(value, dtype)
        except DTypeError as err:
            raise self.fail(f"constant {value!r} {err}") from None


_INT64 = parse("int64")


def _dim_strides(layout: RegisterLayout) -> list[int]:
    """A mode's weight inside its dimension (the product of the later modes' sizes)."""
    strides = [1] * len(layout.mode_shape)
    dims = layout.mode_dims
    for m in reversed(range(len(layout.mode_shape) - 1)):
        if dims[m] == dims[m + 1]:
            strides[m] = strides[m + 1] * layout.mode_shape[m + 1]
    return strides


def _broadcast_map(src: RegisterLayout, dst: RegisterLayout, oshape: tuple[int, ...]
                   ) -> list[int] | str:
    """`KernelContext.broadcast_map` over whole layout tables (vectorized): the map, or
    "not held" / "differs" naming why there is none."""
    size = math.prod(oshape)
    held = src.table()  # [thread, local, dim] of the operand
    flat = np.ravel_multi_index(tuple(np.moveaxis(held, -1, 0)), oshape)
    local_of = np.zeros(size, dtype=np.int64)  # every owner holds it at the same index
    local_of[flat] = np.arange(src.local_size)[None, :]
    owned = np.zeros((src.num_threads, size), dtype=bool)
    owned[np.arange(src.num_threads)[:, None], flat] = True
    wanted = dst.table()[:, :, len(dst.shape) - len(oshape):]  # out's coordinates
    wanted = np.where(np.array(oshape) == 1, 0, wanted)  # broadcast dims read index 0
    need = np.ravel_multi_index(tuple(np.moveaxis(wanted, -1, 0)), oshape)
    if not owned[np.arange(dst.num_threads)[:, None], need].all():
        return "not held"
    rows = local_of[need]
    if (rows != rows[0]).any():
        return "differs"
    return rows[0].tolist()
