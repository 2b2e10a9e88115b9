"""Lowering of synchronization within a block or a cluster and of layout hints: `sync`,
`cluster_sync`, `annotate_layout`.

`sync` is `bar.sync 0` (`bar.sync 1` of the body's warps in a program with a producer
warp); in a program whose `dot`s read shared memory with wgmma it is preceded by
`fence.proxy.async.shared::cta`, which makes the thread's shared-memory writes visible
to the tensor cores' reads (the async proxy). `cluster_sync` is `barrier.cluster.arrive
.release` then `barrier.cluster.wait.acquire` (the same fence first): every thread of
the cluster, the block's own among them, meets there, and the release/acquire pair
makes each block's shared-memory writes visible to the peers' `ld.shared::cluster`.
Every program in clusters also ends with that barrier (codegen), so no block exits
while a peer may still read its shared memory."""

from __future__ import annotations

from collections.abc import Sequence

import llvmlite.ir as ir

from tilevm.backend.llvm.context import KernelContext
from tilevm.ir import instructions as ins


def lower_sync(cg: KernelContext, inst: ins.Sync) -> None:
    _fence_to_tensor_cores(cg)
    emit_barrier(cg)


def lower_cluster_sync(cg: KernelContext, inst: ins.ClusterSync) -> None:
    _fence_to_tensor_cores(cg)
    cluster_barrier(cg)


def _fence_to_tensor_cores(cg: KernelContext) -> None:
    if cg.wgmma is not None:
        # wgmma reads shared memory through the async proxy: each thread's writes (its
        # st.shared and finished cp.async) are fenced to it before the barrier
        # publishes them to the other threads.
        void_asm(cg, "fence.proxy.async.shared::cta;", "")


def cluster_barrier(cg: KernelContext, wait: bool = True) -> None:
    """Every thread of the cluster waits here for all the others (arrives only, without
    `wait`, and then must exit); what each wrote before is visible to all after."""
    text = "barrier.cluster.arrive.release;"
    if wait:
        text += "\n\tbarrier.cluster.wait.acquire;"
    void_asm(cg, text, "~{memory}")


def void_asm(cg: KernelContext, text: str, constraints: str,
             args: Sequence[ir.Value] = ()) -> ir.Value:
    """Inline PTX with side effects and no result, on `args` (also the TMA lowering's)."""
    fn_ty = ir.FunctionType(ir.VoidType(), [a.type for a in args])
    return cg.b.call(ir.InlineAsm(fn_ty, text, constraints, side_effect=True), list(args))


def emit_barrier(cg: KernelContext, whole_block: bool = False) -> None:
    """`bar.sync 0`: every thread of the block waits here for the others (also used
    inside other instructions' lowerings: reductions across warps, `atomic_add`). In a
    program with a producer warp, the warps that run the body wait for each other only
    (`bar.sync 1, num_threads`), unless `whole_block`."""
    if cg.program.producer_warps and not whole_block:
        void_asm(cg, f"bar.sync 1, {cg.program.num_threads};", "~{memory}")
        return
    fn = cg.module.globals.get("llvm.nvvm.barrier0") or ir.Function(
        cg.module, ir.FunctionType(ir.VoidType(), []), "llvm.nvvm.barrier0")
    cg.b.call(fn, [])


def lower_annotate_layout(cg: KernelContext, inst: ins.AnnotateLayout) -> None:
    pass  # consumed by layout inference
