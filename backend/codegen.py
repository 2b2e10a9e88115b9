"""Codegen: a verified, layout-complete `Program` -> an LLVM module for one kernel.

Expects: every register tensor has a `RegisterLayout` (run `infer_layouts` first).
Guarantees: a module whose kernel computes, per thread, exactly what the interpreter
computes for that thread's elements; unsupported instructions raise `VMError` naming
the instruction and the user's line (never wrong code).

How a tile becomes per-thread code: thread `t` holds element `l` of a register tile at
coordinate `layout.global_index(t, l)`, which splits into a thread part and a local
part, `global_index(t, 0) + global_index(0, l)` (every mode adds `digit * stride` to
its dimension, and thread and local digits are disjoint). The thread part is a few
integer ops on `%tid.x` (emitted once per layout); the local part is a constant per
`l`. A register tile is therefore a Python list of LLVM values, one per local index;
tiles that a loop carries (`assign` destinations) and scalar variables live in
`alloca`s, which LLVM's SROA turns back into registers.

Each instruction is lowered by the method `lower_<opname>`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import llvmlite.ir as ir

from tilevm.backend import conversions
from tilevm.backend.target import DATA_LAYOUT, TRIPLE
from tilevm.dtypes import DataType, Kind, parse
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
from tilevm.ir.stmt import AssignVar, For, If, Let, Program, Seq
from tilevm.ir.types import Pointer, Tensor
from tilevm.layouts import RegisterLayout

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
PTR = ir.PointerType()


def llvm_type(dtype: DataType) -> ir.Type:
    """The LLVM type of one element held in a register (sub-byte codes as i8)."""
    if dtype.is_float and dtype.bits >= 16:
        return conversions.float_ir_type(dtype)
    if dtype.is_float:  # 8-bit and narrower floats are held as their codes
        return I8
    return ir.IntType(max(dtype.bits, 8) if dtype.bits > 1 else 1)


@dataclass
class GlobalViewValue:
    base: ir.Value  # the pointer parameter
    offset: ir.Value  # i64, in elements
    shape: list[ir.Value]  # i64
    strides: list[ir.Value]  # i64
    dtype: DataType


class KernelCodegen:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.module = ir.Module(program.name)
        self.module.triple = TRIPLE
        self.module.data_layout = DATA_LAYOUT
        params = [PTR if isinstance(p, Pointer) else llvm_type(p.dtype)
                  for p in program.params]
        self.function = ir.Function(self.module, ir.FunctionType(ir.VoidType(), params),
                                    program.name)
        self.function.calling_convention = "ptx_kernel"
        self.function.attributes.add("nounwind")
        # Launch bounds: the block size is fixed per program (PTX .maxntid).
        annotations = self.module.add_named_metadata("nvvm.annotations")
        annotations.add(self.module.add_metadata([
            self.function, ir.MetaDataString(self.module, "maxntidx"),
            ir.Constant(I32, program.num_threads)]))
        self.entry = self.function.append_basic_block("entry")
        self.b = ir.IRBuilder(self.entry)
        self.scalars: dict[str, Any] = {}  # Var name -> ir.Value or an alloca (let vars)
        self.pointers: dict[str, ir.Value] = {}
        self.tensors: dict[str, Any] = {}
        self.carried: set[str] = set()
        self.divisors: dict[str, int] = {}  # a proven divisor of each loop variable
        self.view_exprs: dict[int, tuple[tuple[Expr, ...], Expr]] = {}
        for param, arg in zip(program.params, self.function.args):
            arg.name = param.name
            if isinstance(param, Pointer):
                self.pointers[param.name] = arg
            else:
                self.scalars[param.name] = arg
        self.tid = self._sreg("tid.x")
        self._thread_parts: dict[RegisterLayout, list[ir.Value]] = {}
        self.inst: ins.Instruction | None = None

    # ---- entry point ---------------------------------------------------------------------
    def generate(self) -> ir.Module:
        self._find_carried(self.program.body)
        self.lower_seq(self.program.body)
        self.b.ret_void()
        return self.module

    def _find_carried(self, seq: Seq) -> None:
        for stmt in seq.body:
            if isinstance(stmt, ins.Assign):
                self.carried.add(stmt.dst.name)
            elif isinstance(stmt, For):
                self._find_carried(stmt.body)
            elif isinstance(stmt, If):
                self._find_carried(stmt.then_body)
                if stmt.else_body is not None:
                    self._find_carried(stmt.else_body)

    def fail(self, message: str) -> VMError:
        inst = self.inst
        return VMError(message, format_instruction(inst) if inst else None,
                       inst.loc if inst else None)

    # ---- statements ----------------------------------------------------------------------
    def lower_seq(self, seq: Seq) -> None:
        for stmt in seq.body:
            if isinstance(stmt, ins.Instruction):
                self.inst = stmt
                method = getattr(self, f"lower_{stmt.opname}", None)
                if method is None:
                    raise self.fail(f"{stmt.opname} is not supported by the GPU backend yet")
                method(stmt)
                self.inst = None
            elif isinstance(stmt, Let):
                slot = self._entry_alloca(llvm_type(stmt.var.dtype), stmt.var.name)
                self.b.store(self.expr(stmt.value, stmt.var.dtype), slot)
                self.scalars[stmt.var.name] = slot
            elif isinstance(stmt, AssignVar):
                self.b.store(self.expr(stmt.value, stmt.var.dtype), self.scalars[stmt.var.name])
            elif isinstance(stmt, For):
                self.lower_for(stmt)
            elif isinstance(stmt, If):
                cond = self.expr(stmt.cond)
                if stmt.else_body is None:
                    with self.b.if_then(cond):
                        self.lower_seq(stmt.then_body)
                else:
                    with self.b.if_else(cond) as (then, otherwise):
                        with then:
                            self.lower_seq(stmt.then_body)
                        with otherwise:
                            self.lower_seq(stmt.else_body)
            elif isinstance(stmt, Seq):
                self.lower_seq(stmt)

    def lower_for(self, loop: For) -> None:
        ty = llvm_type(loop.var.dtype)
        slot = self._entry_alloca(ty, loop.var.name)
        start, stop, step = (self.expr(e, loop.var.dtype) for e in (loop.start, loop.stop,
                                                                     loop.step))
        self.b.store(start, slot)
        head = self.function.append_basic_block(f"{loop.var.name}.head")
        body = self.function.append_basic_block(f"{loop.var.name}.body")
        done = self.function.append_basic_block(f"{loop.var.name}.done")
        self.b.branch(head)
        self.b.position_at_end(head)
        i = self.b.load(slot)
        # A negative step counts down (range semantics); the sign is known when constant.
        negative = isinstance(loop.step, Const) and loop.step.value < 0
        self.b.cbranch(self.b.icmp_signed(">" if negative else "<", i, stop), body, done)
        self.b.position_at_end(body)
        self.scalars[loop.var.name] = i
        self.divisors[loop.var.name] = math.gcd(self.divisor(loop.start), self.divisor(loop.step))
        self.lower_seq(loop.body)
        self.b.store(self.b.add(self.b.load(slot), step), slot)
        self.b.branch(head)
        self.b.position_at_end(done)
        del self.scalars[loop.var.name]
        self.scalars[loop.var.name] = None  # not visible after the loop

    # ---- scalar expressions --------------------------------------------------------------
    def expr(self, e: Expr, as_dtype: DataType | None = None) -> ir.Value:
        value = self._expr(e)
        if as_dtype is not None and as_dtype != e.dtype:
            value = self.convert_scalar(value, e.dtype, as_dtype)
        return value

    def _expr(self, e: Expr) -> ir.Value:
        b = self.b
        if isinstance(e, Const):
            ty = llvm_type(e.dtype)
            if isinstance(ty, ir.IntType):
                return ir.Constant(ty, int(e.value) & ((1 << ty.width) - 1))
            return ir.Constant(ty, float(e.value))
        if isinstance(e, Var):
            value = self.scalars[e.name]
            return b.load(value) if isinstance(value, ir.AllocaInstr) else value
        if isinstance(e, BlockIndex):
            return self._sreg(f"ctaid.{'xyz'[e.axis]}")
        if isinstance(e, ScalarCast):
            return self.convert_scalar(self._expr(e.operand), e.operand.dtype, e.dtype)
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
            _promote_for_compare(e.lhs.dtype, e.rhs.dtype)
        x, y = self.expr(e.lhs, operand), self.expr(e.rhs, operand)
        return scalar_binary(b, op, x, y, operand)

    def convert_scalar(self, value: ir.Value, src: DataType, dst: DataType) -> ir.Value:
        return convert_value(self.b, value, src, dst)

    # ---- helpers ----------------------------------------------------------------------------
    def _sreg(self, name: str) -> ir.Value:
        fn = self.module.globals.get(f"llvm.nvvm.read.ptx.sreg.{name}")
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(I32, []),
                             f"llvm.nvvm.read.ptx.sreg.{name}")
        return self.b.call(fn, [])

    def _entry_alloca(self, ty: ir.Type, name: str) -> ir.AllocaInstr:
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
        value = self.tensors[tensor.name]
        if tensor.name in self.carried:
            return [self.b.load(slot) for slot in value]
        return value

    def define(self, tensor: Tensor, values: list[ir.Value]) -> None:
        if tensor.name in self.carried:
            slots = [self._entry_alloca(v.type, f"{tensor.name}.{i}")
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
        pad = len(dst.shape) - len(oshape)
        mapping = []
        for t in range(dst.num_threads):
            row = []
            for l in range(dst.local_size):
                coord = dst.global_index(t, l)[pad:]
                coord = tuple(c if s != 1 else 0 for c, s in zip(coord, oshape))
                owners = dict(src.owners(coord))
                if t not in owners:
                    raise self.fail(f"%{operand.name} (layout {src}) is not held by the threads "
                                    f"that need it for %{out.name} (layout {dst}); layout "
                                    "conversion is not supported by the GPU backend yet")
                row.append(owners[t])
            if mapping and row != mapping:
                raise self.fail(f"%{operand.name} broadcasts to %{out.name} differently in "
                                "different threads; layout conversion is not supported yet")
            mapping = row
        return mapping

    # ---- instructions ------------------------------------------------------------------------
    def lower_global_view(self, inst: ins.GlobalView) -> None:
        value = self.tensors[inst.out.name] = GlobalViewValue(
            base=self.pointers[inst.ptr.name],
            offset=self._i64(inst.offset),
            shape=[self._i64(s) for s in inst.out.shape],
            strides=[self._i64(s) for s in inst.strides],
            dtype=inst.out.dtype)
        self.view_exprs[id(value)] = (inst.strides, inst.offset)

    def divisor(self, e: Expr | int) -> int:
        """A number that provably divides the value of `e` (0 divides only 0), used to
        prove the alignment of vector accesses."""
        if isinstance(e, int):
            return abs(e)
        if isinstance(e, Const):
            return abs(int(e.value)) if e.dtype.is_integer else 1
        if isinstance(e, Var):
            return self.divisors.get(e.name, 1)
        if isinstance(e, Binary) and e.op == "*":
            return self.divisor(e.lhs) * self.divisor(e.rhs)
        if isinstance(e, Binary) and e.op in ("+", "-"):
            return math.gcd(self.divisor(e.lhs), self.divisor(e.rhs))
        if isinstance(e, Binary) and e.op == "<<" and isinstance(e.rhs, Const):
            return self.divisor(e.lhs) << int(e.rhs.value)
        return 1

    def _i64(self, e: Expr | int) -> ir.Value:
        if isinstance(e, int):
            return ir.Constant(I64, e)
        return self.convert_scalar(self._expr(e), e.dtype, _INT64)

    def _vector_width(self, view: GlobalViewValue, view_expr: ins.GlobalView | None,
                      tile: Tensor, offsets: tuple[Expr, ...]) -> int:
        """The widest vector (in elements, at most 16 bytes) for accesses of `tile` through
        `view`: consecutive registers at consecutive elements of a unit-stride last
        dimension, at addresses provably aligned to the vector's size."""
        layout = self.layout_of(tile)
        bytes_ = max(view.dtype.bits // 8, 1)
        width = 16 // bytes_
        strides, offset = self.view_exprs[id(view)]
        if not (isinstance(strides[-1], Const) and strides[-1].value == 1):
            return 1
        locals_ = self.local_parts(layout)
        while width > 1:
            # Registers l..l+w-1 (l a multiple of w) are w consecutive last-dim elements,
            # and every address the thread can start a vector at is a multiple of w.
            runs = all(locals_[l + i][:-1] == locals_[l][:-1] and
                       locals_[l + i][-1] == locals_[l][-1] + i and locals_[l][-1] % width == 0
                       for l in range(0, layout.local_size, width) for i in range(width)) \
                if layout.local_size % width == 0 else False
            thread_ok = all(layout.global_index(t, 0)[-1] % width == 0
                            for t in range(layout.num_threads))
            aligned = all(self.divisor(e) % width == 0 for e in (offset, offsets[-1],
                                                                 *strides[:-1]))
            if runs and thread_ok and aligned:
                return width
            width //= 2
        return 1

    def _element_addresses(self, view: GlobalViewValue, tile: Tensor,
                           offsets: tuple[Expr, ...], width: int
                           ) -> list[tuple[ir.Value, ir.Value, ir.Value]]:
        """For each group of `width` registers: (every element in bounds, the first
        element's index, and per element in-bounds predicates)."""
        if view.dtype.bits < 8:
            raise self.fail("sub-byte global tensors are not supported by the GPU backend yet")
        layout = self.layout_of(tile)
        base = [self.b.add(t, self._i64(o)) for t, o in zip(self.thread_part(layout), offsets)]
        groups = []
        locals_ = self.local_parts(layout)
        for start in range(0, layout.local_size, width):
            preds, index = [], view.offset
            for i in range(width):
                inside = ir.Constant(I1, 1)
                for d, c in enumerate(locals_[start + i]):
                    coord = self.b.add(base[d], ir.Constant(I64, c))
                    ok = self.b.and_(self.b.icmp_signed(">=", coord, ir.Constant(I64, 0)),
                                     self.b.icmp_signed("<", coord, view.shape[d]))
                    inside = self.b.and_(inside, ok)
                    if i == 0:
                        index = self.b.add(index, self.b.mul(coord, view.strides[d]))
                preds.append(inside)
            whole = preds[0]
            for p in preds[1:]:
                whole = self.b.and_(whole, p)
            groups.append((whole, index, preds))
        return groups

    def lower_load_global(self, inst: ins.LoadGlobal) -> None:
        view = self.tensors[inst.src.name]
        ty = llvm_type(inst.out.dtype)
        other = self._constant(inst.other, inst.out.dtype)
        width = self._vector_width(view, None, inst.out, inst.offsets)
        vec_ty = ir.VectorType(ty, width)
        values: list[ir.Value] = []
        for whole, index, preds in self._element_addresses(view, inst.out, inst.offsets, width):
            # The fast path: the whole vector is inside the view (one ld.global.vN).
            # A vector straddling a ragged edge loads element by element.
            with self.b.if_else(whole) as (then, otherwise):
                with then:
                    ptr = self.b.gep(view.base, [index], source_etype=ty)
                    if width > 1:
                        vec = self.b.load(ptr, typ=vec_ty, align=width * max(ty_bytes(ty), 1))
                    else:
                        vec = self.b.load(ptr, typ=ty)
                    fast = self.b.block
                with otherwise:
                    parts = []
                    for i, inside in enumerate(preds):
                        safe = self.b.select(inside, self.b.add(index, ir.Constant(I64, i)),
                                             view.offset)
                        loaded = self.b.load(self.b.gep(view.base, [safe], source_etype=ty),
                                             typ=ty)
                        # Predicated: the address is clamped, the value replaced.
                        parts.append(self.b.select(inside, loaded, other))
                    slow_vec = parts[0] if width == 1 else _build_vector(self.b, parts, vec_ty)
                    slow = self.b.block
            phi = self.b.phi(vec_ty if width > 1 else ty)
            phi.add_incoming(vec, fast)
            phi.add_incoming(slow_vec, slow)
            if width == 1:
                values.append(phi)
            else:
                values += [self.b.extract_element(phi, ir.Constant(I32, i)) for i in range(width)]
        self.define(inst.out, values)

    def lower_store_global(self, inst: ins.StoreGlobal) -> None:
        view = self.tensors[inst.dst.name]
        ty = llvm_type(view.dtype)
        if inst.src.dtype != view.dtype:
            raise self.fail("store_global of a tile of another dtype; cast it first")
        values = self.register_values(inst.src)
        width = self._vector_width(view, None, inst.src, inst.offsets)
        groups = self._element_addresses(view, inst.src, inst.offsets, width)
        for g, (whole, index, preds) in enumerate(groups):
            chunk = values[g * width:(g + 1) * width]
            with self.b.if_else(whole) as (then, otherwise):
                with then:
                    ptr = self.b.gep(view.base, [index], source_etype=ty)
                    if width > 1:
                        vec = _build_vector(self.b, chunk, ir.VectorType(ty, width))
                        self.b.store(vec, ptr, align=width * max(ty_bytes(ty), 1))
                    else:
                        self.b.store(chunk[0], ptr)
                with otherwise:
                    for i, (inside, value) in enumerate(zip(preds, chunk)):
                        with self.b.if_then(inside):
                            elem = self.b.add(index, ir.Constant(I64, i))
                            self.b.store(value, self.b.gep(view.base, [elem], source_etype=ty))

    def _constant(self, value: int | float, dtype: DataType) -> ir.Value:
        ty = llvm_type(dtype)
        if isinstance(ty, ir.IntType):
            return ir.Constant(ty, int(value) & ((1 << ty.width) - 1))
        return ir.Constant(ty, float(value))

    def lower_full(self, inst: ins.Full) -> None:
        value = self.expr(inst.value, inst.out.dtype)
        self.define(inst.out, [value] * self.layout_of(inst.out).local_size)

    def lower_assign(self, inst: ins.Assign) -> None:
        if inst.dst.layout != inst.src.layout:
            raise self.fail("assign between tiles of different layouts is not supported yet")
        for slot, value in zip(self.tensors[inst.dst.name], self.register_values(inst.src)):
            self.b.store(value, slot)

    def lower_cast(self, inst: ins.Cast) -> None:
        values = self.operand_values(inst.src, inst.out)
        self.define(inst.out, [convert_value(self.b, v, inst.src.dtype, inst.out.dtype)
                               for v in values])

    def lower_elementwise(self, inst: ins.Elementwise) -> None:
        dtype = next(a.dtype for a in inst.args if isinstance(a, Tensor))
        operands = [self.operand_values(a, inst.out) if isinstance(a, Tensor) else
                    [self.expr(a, dtype)] * self.layout_of(inst.out).local_size
                    for a in inst.args]
        self.define(inst.out, [tile_op(self.b, inst.op, [o[i] for o in operands], dtype)
                               for i in range(len(operands[0]))])

    def lower_where(self, inst: ins.Where) -> None:
        dtype = inst.out.dtype
        cond = self.operand_values(inst.cond, inst.out)
        x = self.operand_values(inst.x, inst.out) if isinstance(inst.x, Tensor) else \
            [self.expr(inst.x, dtype)] * len(cond)
        y = self.operand_values(inst.y, inst.out) if isinstance(inst.y, Tensor) else \
            [self.expr(inst.y, dtype)] * len(cond)
        self.define(inst.out, [self.b.select(c, a, o) for c, a, o in zip(cond, x, y)])

    def lower_sync(self, inst: ins.Sync) -> None:
        fn = self.module.globals.get("llvm.nvvm.barrier0") or ir.Function(
            self.module, ir.FunctionType(ir.VoidType(), []), "llvm.nvvm.barrier0")
        self.b.call(fn, [])

    def lower_annotate_layout(self, inst: ins.AnnotateLayout) -> None:
        pass  # consumed by layout inference


# ---- scalar and elementwise arithmetic ---------------------------------------------------------

_F32, _INT64 = parse("f32"), parse("int64")
_promote_for_compare = promote


def _dim_strides(layout: RegisterLayout) -> list[int]:
    """A mode's weight inside its dimension (the product of the later modes' sizes)."""
    strides = [1] * len(layout.mode_shape)
    dims = layout.mode_dims
    for m in reversed(range(len(layout.mode_shape) - 1)):
        if dims[m] == dims[m + 1]:
            strides[m] = strides[m + 1] * layout.mode_shape[m + 1]
    return strides


def ty_bytes(ty: ir.Type) -> int:
    if isinstance(ty, ir.IntType):
        return ty.width // 8
    return {"half": 2, "bfloat": 2, "float": 4, "double": 8}[str(ty)]


def _build_vector(b: ir.IRBuilder, parts: list[ir.Value], ty: ir.VectorType) -> ir.Value:
    vec = ir.Constant(ty, ir.Undefined)
    for i, part in enumerate(parts):
        vec = b.insert_element(vec, part, ir.Constant(I32, i))
    return vec


def convert_value(b: ir.IRBuilder, value: ir.Value, src: DataType, dst: DataType) -> ir.Value:
    """One value from `src` to `dst`: round to nearest even, saturating integers."""
    if src == dst:
        return value
    if src.is_lowbit and (src.is_float or src.bits < 8) and dst.is_float and dst.bits >= 16:
        return conversions.emit_convert(b, value, src, dst)
    dst_ty = llvm_type(dst)
    if src.is_float and dst.is_float:
        if src.bits < 16 or dst.bits < 16:
            raise VMError(f"conversion {src} -> {dst} is not supported by the GPU backend yet")
        if src.bits == 16 and dst.bits == 16:  # f16 <-> bf16 through f32 (exact, then RNE)
            value, src = b.fpext(value, ir.FloatType()), _F32
        if dst.bits > src.bits:
            return b.fpext(value, dst_ty)
        return b.fptrunc(value, dst_ty)
    if src.is_float:  # float -> integer: round to nearest even, then saturate
        rint = b.call(_intrinsic(b, "llvm.rint", value.type, [value.type]), [value])
        name = "llvm.fptosi.sat" if dst.kind is not Kind.UNSIGNED else "llvm.fptoui.sat"
        return b.call(_intrinsic(b, name, dst_ty, [rint.type]), [rint])
    if dst.is_float:
        return b.sitofp(value, dst_ty) if src.is_signed else b.uitofp(value, dst_ty)
    if dst.bits == src.bits or isinstance(dst_ty, ir.IntType) and dst_ty.width == value.type.width:
        return value
    if dst_ty.width < value.type.width:
        return b.trunc(value, dst_ty)
    return b.sext(value, dst_ty) if src.is_signed else b.zext(value, dst_ty)


def _intrinsic(b: ir.IRBuilder, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    module = b.module
    suffix = ".".join(_type_suffix(t) for t in ([ret] if name.endswith("sat") else [])
                      + args)
    full = f"{name}.{suffix}"
    fn = module.globals.get(full)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), full)
    return fn


def _type_suffix(t: ir.Type) -> str:
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    return {"half": "f16", "float": "f32", "double": "f64", "bfloat": "bf16"}[str(t)]


_INT_OPS = {"+": "add", "-": "sub", "*": "mul", "&": "and_", "|": "or_", "^": "xor",
            "<<": "shl"}
_FLOAT_OPS = {"+": "fadd", "-": "fsub", "*": "fmul", "/": "fdiv"}


def scalar_binary(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value,
                  dtype: DataType) -> ir.Value:
    """A binary scalar operator of ir/expr.py on two values of `dtype`."""
    if op in ("<", "<=", "==", "!=", ">", ">="):
        if dtype.is_float:
            return b.fcmp_ordered(op, x, y)
        return (b.icmp_signed if dtype.is_signed else b.icmp_unsigned)(op, x, y)
    if dtype.is_float:
        if op in _FLOAT_OPS:
            return getattr(b, _FLOAT_OPS[op])(x, y)
        if op in ("min", "max"):
            name = "llvm.minimum" if op == "min" else "llvm.maximum"
            return b.call(_intrinsic(b, name, x.type, [x.type]), [x, y])
        raise VMError(f"operator {op} on floats is not supported by the GPU backend yet")
    if op in _INT_OPS:
        return getattr(b, _INT_OPS[op])(x, y)
    if op == ">>":
        return b.ashr(x, y) if dtype.is_signed else b.lshr(x, y)
    if op in ("min", "max"):
        pick = b.icmp_signed("<" if op == "min" else ">", x, y) if dtype.is_signed else \
            b.icmp_unsigned("<" if op == "min" else ">", x, y)
        return b.select(pick, x, y)
    if op in ("//", "%", "cdiv"):
        return _floor_div_mod(b, op, x, y, dtype)
    raise VMError(f"operator {op} is not supported by the GPU backend yet")


def _floor_div_mod(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value,
                   dtype: DataType) -> ir.Value:
    zero = ir.Constant(x.type, 0)
    if op == "cdiv":  # ceil(x / y) = -floor(-x / y)
        return b.neg(_floor_div_mod(b, "//", b.neg(x), y, dtype))
    if not dtype.is_signed:
        return b.udiv(x, y) if op == "//" else b.urem(x, y)
    q, r = b.sdiv(x, y), b.srem(x, y)
    # C truncates; Python floors: adjust when the remainder's sign differs from y's.
    adjust = b.and_(b.icmp_signed("!=", r, zero),
                    b.icmp_signed("!=", b.icmp_signed("<", r, zero),
                                  b.icmp_signed("<", y, zero)))
    if op == "//":
        return b.sub(q, b.zext(adjust, x.type))
    return b.select(adjust, b.add(r, y), r)


_TILE_BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/", "min": "min", "max": "max",
                "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>", "mod": "%",
                "lt": "<", "le": "<=", "eq": "==", "ne": "!=", "gt": ">", "ge": ">="}


def tile_op(b: ir.IRBuilder, op: str, args: list[ir.Value], dtype: DataType) -> ir.Value:
    """One element of an `elementwise` instruction. f16/bf16 arithmetic is done in f32
    and rounded once (what the interpreter specifies)."""
    widen = dtype.is_float and dtype.bits == 16 and op not in ("neg", "abs")
    if widen:
        args = [b.fpext(a, ir.FloatType()) for a in args]
        compute = _F32
    else:
        compute = dtype
    if len(args) == 2:
        result = scalar_binary(b, _TILE_BINARY[op], args[0], args[1], compute)
    else:
        result = _tile_unary(b, op, args[0], compute)
    if widen and op not in ("lt", "le", "eq", "ne", "gt", "ge"):
        result = b.fptrunc(result, llvm_type(dtype))
    return result


def _tile_unary(b: ir.IRBuilder, op: str, x: ir.Value, dtype: DataType) -> ir.Value:
    if op == "neg":
        return b.fneg(x) if dtype.is_float else b.neg(x)
    if op == "not":
        return b.not_(x)
    if op == "abs":
        if dtype.is_float:
            return b.call(_intrinsic(b, "llvm.fabs", x.type, [x.type]), [x])
        return b.select(b.icmp_signed("<", x, ir.Constant(x.type, 0)), b.neg(x), x)
    names = {"exp": "llvm.exp", "exp2": "llvm.exp2", "log": "llvm.log", "log2": "llvm.log2",
             "sqrt": "llvm.sqrt"}
    if op in names:
        return b.call(_intrinsic(b, names[op], x.type, [x.type]), [x])
    if op == "rsqrt":
        root = b.call(_intrinsic(b, "llvm.sqrt", x.type, [x.type]), [x])
        return b.fdiv(ir.Constant(x.type, 1.0), root)
    raise VMError(f"elementwise {op} is not supported by the GPU backend yet")


def generate(program: Program) -> ir.Module:
    """The LLVM module of a layout-complete program (see the module docstring)."""
    return KernelCodegen(program).generate()
