"""Running backend LLVM IR on the CPU (tests/ is on sys.path): the conversion and view
rules are emitted into a host module, compiled by llvmlite's MCJIT for this machine, and
called through ctypes on numpy arrays, so their results can be compared exhaustively
with the dtypes codec."""

from __future__ import annotations

from collections.abc import Callable

import llvmlite.binding as llvm
import llvmlite.ir as ir

I32 = ir.IntType(32)
PTR = ir.PointerType()


def host_module(name: str) -> ir.Module:
    module = ir.Module(name=name)
    module.triple = llvm.get_process_triple()
    return module


def counted_loop(module: ir.Module, name: str,
                 body: Callable[[ir.IRBuilder, ir.Value, ir.Value, ir.Value], None]) -> None:
    """`void name(ptr in, ptr out, i32 n)` running `body(builder, i, in, out)` for every
    `i < n`."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I32]), name)
    src, dst, n = fn.args
    entry, loop, done = (fn.append_basic_block(x) for x in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, I32(0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(I32)
    i.add_incoming(I32(0), entry)
    body(b, i, src, dst)
    nxt = b.add(i, I32(1))
    i.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    b.ret_void()


def compile_for_host(module: ir.Module) -> llvm.ExecutionEngine:
    """The module compiled for this CPU, with its features (F16C: the host's half
    conversions), ready to call."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    machine = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                           features=llvm.get_host_cpu_features().flatten(),
                                           opt=2)
    engine = llvm.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    return engine
