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

Low-bit tiles are packed (pass `lower_bit_packing`): a tile of elements of 8 bits or
fewer (`is_packed`) is held
as the i32 words of the thread's bit string, local `l` at bits `[l*b, (l+1)*b)` (the
order of `layouts.register_bits`, the same as `dtypes.pack`). A `view` between packed
tiles is then free (the same words), a load of packed bytes is a load of words, and
`cast` reads its codes out of the words. `register_values` / `define` unpack / pack for
the lowerings that work on one value per element (LLVM folds the shifts away where the
values come from or go to words anyway); `register_words` / `define_words` give the
words themselves.

Each instruction is lowered by the function `lower_<opname>` of its family's module in
backend/lowering/ (`LOWERINGS`); this module holds what they share: the kernel's
setup, statements and scalar expressions, and the layout arithmetic.
"""

from __future__ import annotations

import math
from typing import Any

import llvmlite.ir as ir
import numpy as np

from tilevm.backend.arith import I32, I64, PTR, convert_value, llvm_type, scalar_binary
from tilevm.backend.passes.lower_bit_packing import is_packed
from tilevm.backend.target import DATA_LAYOUT, TRIPLE
from tilevm.dtypes import DataType, parse
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


class KernelCodegen:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.module = ir.Module(program.name)
        self.module.triple = TRIPLE
        self.module.data_layout = DATA_LAYOUT
        params = [PTR if isinstance(p, Pointer) else llvm_type(p.dtype)
                  for p in program.params]
        # Tensor maps of TMA copies: parameters after the program's own (lowering.tma)
        self.tensor_maps = tma.tensor_maps(program)
        params += [ir.PointerType(tma.MAP_TYPE)] * len(self.tensor_maps)
        self.function = ir.Function(self.module, ir.FunctionType(ir.VoidType(), params),
                                    program.name)
        self.function.calling_convention = "ptx_kernel"
        self.function.attributes.add("nounwind")
        # Launch bounds: the block size is fixed per program (PTX .maxntid).
        annotations = self.module.add_named_metadata("nvvm.annotations")
        annotations.add(self.module.add_metadata([
            self.function, ir.MetaDataString(self.module, "maxntidx"),
            ir.Constant(I32, program.block_threads)]))
        if program.producer_registers:
            # setmaxnreg needs the registers at entry known, and the split into the
            # producer's and the body's was computed from them (`Program.body_registers`):
            # `.maxnreg` makes ptxas use exactly that many (`.maxntid` alone lets it
            # choose fewer, or ignore setmaxnreg, C7508).
            annotations.add(self.module.add_metadata([
                self.function, ir.MetaDataString(self.module, "maxnreg"),
                ir.Constant(I32, program.entry_registers)]))
        if program.cluster > 1:  # PTX .reqnctapercluster: launched in clusters as is
            for axis, blocks in zip("xyz", (program.cluster, 1, 1)):
                annotations.add(self.module.add_metadata([
                    self.function, ir.MetaDataString(self.module, f"cluster_dim_{axis}"),
                    ir.Constant(I32, blocks)]))
        if self.tensor_maps:
            tma.add_map_params(self.function, self.module, len(program.params),
                               len(self.tensor_maps), annotations)
        self.entry = self.function.append_basic_block("entry")
        self.b = ir.IRBuilder(self.entry)
        self.scalars: dict[str, Any] = {}  # Var name -> ir.Value or an alloca (let vars)
        self.pointers: dict[str, ir.Value] = {}
        self.tensors: dict[str, Any] = {}
        self.carried: set[str] = set()
        # A program with wgmma dots: where to wait for them (and syncs fence shared writes).
        self.wgmma = InFlight(self) if uses_wgmma(program) else None
        self.tma: tma.TmaState | None = None  # set up by `generate` for TMA copies
        self.in_producer = False  # lowering the producer warp's body
        for param, arg in zip(program.params, self.function.args):
            arg.name = param.name
            if isinstance(param, Pointer):
                self.pointers[param.name] = arg
            else:
                self.scalars[param.name] = arg
        self.tid = self.sreg("tid.x")
        self._thread_parts: dict[RegisterLayout, list[ir.Value]] = {}
        self._broadcast_maps: dict[tuple, list[int]] = {}
        self.inst: ins.Instruction | None = None

    # ---- entry point ---------------------------------------------------------------------
    def generate(self) -> ir.Module:
        self._find_carried(self.program.body)
        if self.program.producer is not None:  # a converting producer's carried codes
            self._find_carried(self.program.producer)
        if self.tensor_maps:  # TMA copies: their barrier ring and group counter
            self.tma = tma.TmaState(self, self.tensor_maps, len(self.program.params))
            tma.init_barriers(self, self.tma)
        if self.program.producer is not None:
            self._lower_producer(self.program.producer)
        self.lower_seq(self.program.body)
        if self.wgmma is not None:
            self.wgmma.before(self, None)
        if self.program.cluster > 1:  # no block leaves while a peer may still reach it
            tma.cluster_barrier(self)
        self.b.ret_void()
        return self.module

    def _lower_producer(self, producer: Seq) -> None:
        """The producer warp's body, run by its first thread (a converting producer's by
        all its threads, numbered from 0 as the body's are: its register tiles are laid
        out as theirs); the warps then return and the code after this runs in the
        `num_warps` warps of `body`. With `producer_registers` the producer warpgroups
        first give registers back and the other warps then take them (`setmaxnreg`,
        executed by whole warpgroups)."""
        b, first = self.b, ir.Constant(I32, self.program.num_threads)
        registers = self.program.producer_registers
        # The body defines its scalars and tensors anew: what the producer's did goes.
        scalars, tensors = dict(self.scalars), dict(self.tensors)
        tid, parts = self.tid, self._thread_parts
        with b.if_then(b.icmp_unsigned(">=", self.tid, first)):
            if registers:
                self._setmaxnreg("dec", registers)
            wgmma, self.wgmma, self.in_producer = self.wgmma, None, True
            if self.program.producer_converts:
                with b.goto_block(self.entry):  # where the thread parts are computed
                    b.position_before(self.entry.terminator)
                    self.tid, self._thread_parts = b.sub(tid, first), {}
                self.lower_seq(producer)
                self.tid, self._thread_parts = tid, parts
            else:
                with b.if_then(b.icmp_unsigned("==", self.tid, first)):
                    self.lower_seq(producer)
            self.wgmma, self.in_producer = wgmma, False
            if self.program.cluster > 1:  # the kernel's last cluster barrier (`generate`):
                # these threads only arrive (the body's warps keep the block resident);
                # waiting there, the warp's other lanes slowed the issuing one 2.5x
                tma.cluster_barrier(self, wait=False)
            b.ret_void()
        if registers:
            self._setmaxnreg("inc", self.program.body_registers)
        self.scalars, self.tensors = scalars, tensors

    def _setmaxnreg(self, action: str, registers: int) -> None:
        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []),
                           f"setmaxnreg.{action}.sync.aligned.u32 {registers};", "",
                           side_effect=True)
        self.b.call(asm, [])

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
                if self.wgmma is not None:
                    self.wgmma.before(self, stmt)
                lower = LOWERINGS.get(stmt.opname)
                if lower is None:
                    raise self.fail(f"{stmt.opname} is not supported by the GPU backend yet")
                lower(self, stmt)
                self.inst = None
            elif isinstance(stmt, Let):
                slot = self.entry_alloca(llvm_type(stmt.var.dtype), stmt.var.name)
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
        slot = self.entry_alloca(ty, loop.var.name)
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
            value = convert_value(self.b, value, e.dtype, as_dtype)
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
        """One LLVM value per local element (`arith.llvm_type`; packed tiles unpacked)."""
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
        ty = llvm_type(dtype)
        if isinstance(ty, ir.IntType):
            return ir.Constant(ty, int(value) & ((1 << ty.width) - 1))
        return ir.Constant(ty, float(value))



# ---- scalar and elementwise arithmetic ---------------------------------------------------------

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
    """`KernelCodegen.broadcast_map` over whole layout tables (vectorized): the map, or
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


def generate(program: Program) -> ir.Module:
    """The LLVM module of a layout-complete program (see the module docstring)."""
    return KernelCodegen(program).generate()


from tilevm.backend.lowering import (  # noqa: E402  (the lowerings use this module)
    LOWERINGS,
    tma,
)
from tilevm.backend.lowering.bitcast import (  # noqa: E402
    extract_bits,
    from_bits,
    pack_words,
    to_bits,
)
from tilevm.backend.lowering.wgmma import InFlight, uses_wgmma  # noqa: E402

