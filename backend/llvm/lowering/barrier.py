"""Lowering of block-level synchronization and layout hints: `sync`,
`annotate_layout`.

`sync` is `bar.sync 0` (`bar.sync 1` of the body's warps in a program with a producer
warp); in a program whose `dot`s read shared memory with wgmma it is preceded by
`fence.proxy.async.shared::cta`, which makes the thread's shared-memory writes visible
to the tensor cores' reads (the async proxy)."""

from __future__ import annotations

import llvmlite.ir as ir

from tilevm.backend.llvm.context import KernelContext
from tilevm.ir import instructions as ins


def lower_sync(cg: KernelContext, inst: ins.Sync) -> None:
    if cg.wgmma is not None:
        # wgmma reads shared memory through the async proxy: each thread's writes (its
        # st.shared and finished cp.async) are fenced to it before the barrier
        # publishes them to the other threads.
        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []),
                           "fence.proxy.async.shared::cta;", "", side_effect=True)
        cg.b.call(asm, [])
    emit_barrier(cg)


def emit_barrier(cg: KernelContext, whole_block: bool = False) -> None:
    """`bar.sync 0`: every thread of the block waits here for the others (also used
    inside other instructions' lowerings: reductions across warps, `atomic_add`). In a
    program with a producer warp, the warps that run the body wait for each other only
    (`bar.sync 1, num_threads`), unless `whole_block`."""
    if cg.program.producer_warps and not whole_block:
        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []),
                           f"bar.sync 1, {cg.program.num_threads};", "~{memory}",
                           side_effect=True)
        cg.b.call(asm, [])
        return
    fn = cg.module.globals.get("llvm.nvvm.barrier0") or ir.Function(
        cg.module, ir.FunctionType(ir.VoidType(), []), "llvm.nvvm.barrier0")
    cg.b.call(fn, [])


def lower_annotate_layout(cg: KernelContext, inst: ins.AnnotateLayout) -> None:
    pass  # consumed by layout inference
