"""Codegen: a verified, layout-complete `Program` -> an LLVM module for one kernel.

Expects: every register tensor has a `RegisterLayout` (run `infer_layouts` first), and
every instruction its `lowering` (the pipeline's passes). Guarantees: a module whose
kernel computes, per thread, exactly what the interpreter computes for that thread's
elements; unsupported instructions raise `VMError` naming the instruction and the
user's line (never wrong code).

`KernelCodegen` sets up the kernel (parameters, launch bounds, tensor maps, the state
of TMA copies and wgmma groups), walks the program's statements and lowers each
instruction by the function `lower_<opname>` of its family's module in
backend/llvm/lowering/ (`LOWERINGS`). What the lowerings share, and how a tile becomes
per-thread values, is `context.KernelContext` (context.py), which they import instead
of this driver.
"""

from __future__ import annotations

import llvmlite.ir as ir

from tilevm.backend.analysis.tma import tensor_maps
from tilevm.backend.analysis.wgmma_waits import uses_wgmma
from tilevm.backend.llvm.builder import KernelBuilder
from tilevm.backend.llvm.context import KernelContext
from tilevm.backend.llvm.lowering import LOWERINGS, tma
from tilevm.backend.llvm.lowering.barrier import cluster_barrier
from tilevm.backend.llvm.lowering.wgmma import InFlight
from tilevm.backend.llvm.nvptx import DATA_LAYOUT, TRIPLE
from tilevm.backend.llvm.types import I32, PTR, llvm_type
from tilevm.ir import instructions as ins
from tilevm.ir.expr import Const
from tilevm.ir.stmt import AssignVar, For, If, Let, Program, Seq
from tilevm.ir.types import Pointer
from tilevm.layouts import RegisterLayout


class KernelCodegen(KernelContext):
    """The driver: one kernel's module, built by `generate`."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.module = ir.Module(program.name)
        self.module.triple = TRIPLE
        self.module.data_layout = DATA_LAYOUT
        params = [PTR if isinstance(p, Pointer) else llvm_type(p.dtype)
                  for p in program.params]
        # Tensor maps of TMA copies: parameters after the program's own (lowering.tma)
        self.tensor_maps = tensor_maps(program)
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
        self.b = KernelBuilder(self.entry)
        self.scalars = {}
        self.pointers = {}
        self.tensors = {}
        self.carried: set[str] = set()
        # A program with wgmma dots: where to wait for them (and syncs fence shared writes).
        self.wgmma = InFlight(self) if uses_wgmma(program) else None
        self.tma: tma.TmaState | None = None  # set up by `generate` for TMA copies
        self.in_producer = False
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
            cluster_barrier(self)
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
                # waiting there, the warp's other lanes would slow the issuing one
                cluster_barrier(self, wait=False)
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


def generate(program: Program) -> ir.Module:
    """The LLVM module of a layout-complete program (see the module docstring)."""
    return KernelCodegen(program).generate()
