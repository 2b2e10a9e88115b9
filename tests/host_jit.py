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


# LLVM rounds x86 bfloat arithmetic's f32 results to bf16 through the libcall
# `__truncsfbf2`, which libgcc has only from GCC 13 on: where this process cannot
# resolve it, MCJIT would call address 0, so the module gets this definition (round to
# nearest even, NaNs kept quiet).
TRUNCSFBF2 = """
define weak bfloat @__truncsfbf2(float %x) {
  %bits = bitcast float %x to i32
  %magnitude = and i32 %bits, 2147483647
  %nan = icmp ugt i32 %magnitude, 2139095040
  %high = lshr i32 %bits, 16
  %odd = and i32 %high, 1
  %half = add i32 %odd, 32767
  %rounded = add i32 %bits, %half
  %nearest = lshr i32 %rounded, 16
  %quiet = or i32 %high, 64
  %chosen = select i1 %nan, i32 %quiet, i32 %nearest
  %short = trunc i32 %chosen to i16
  %result = bitcast i16 %short to bfloat
  ret bfloat %result
}
"""

# x86's own f32 -> bf16 instructions (AVX512-BF16's `vcvtneps2bf16`, AVX-NE-CONVERT)
# treat subnormals as zero, unlike the GPU's `cvt.rn.bf16.f32` and the interpreter:
# the host module does without them (LLVM then rounds with `__truncsfbf2`).
HOST_BF16_FEATURES = ("avx512bf16", "avxneconvert", "amx-bf16")


def compile_for_host(module: ir.Module) -> llvm.ExecutionEngine:
    """The module compiled for this CPU, with its features (F16C: the host's half
    conversions), ready to call."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    text = str(module)
    if llvm.address_of_symbol("__truncsfbf2") is None:
        text += TRUNCSFBF2
    parsed = llvm.parse_assembly(text)
    parsed.verify()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    features = llvm.get_host_cpu_features()
    for name in HOST_BF16_FEATURES:  # their f32 -> bf16 flushes subnormals to zero
        if name in features:
            features[name] = False
    machine = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                           features=features.flatten(), opt=2)
    engine = llvm.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    return engine
