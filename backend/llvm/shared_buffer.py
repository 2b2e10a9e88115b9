"""The block's dynamic shared-memory buffer in LLVM IR: the external `addrspace(3)` array
`tilevm_smem` (`extern __shared__`, declared once per module, aligned to the plan's
largest alignment), and where the shared-memory plan (`analysis.shared_memory`) puts a
tensor or the block's scratch in it. Shared by the lowerings of shared memory, TMA
copies, wgmma and atomics."""

from __future__ import annotations

import llvmlite.ir as ir

from tilevm.backend.analysis.shared_memory import Allocation, shared_plan
from tilevm.backend.llvm.context import KernelContext
from tilevm.backend.llvm.types import I8, I32
from tilevm.ir.types import Tensor
from tilevm.layouts.shared_layout import SharedLayout

SMEM_NAME = "tilevm_smem"
SMEM_PTR = ir.PointerType(addrspace=3)


def shared_base(cg: KernelContext) -> ir.GlobalVariable:
    """The dynamic shared-memory buffer (declared on first use)."""
    gv = cg.module.globals.get(SMEM_NAME)
    if gv is None:
        gv = ir.GlobalVariable(cg.module, ir.ArrayType(I8, 0), SMEM_NAME, addrspace=3)
        gv.type = SMEM_PTR  # an opaque pointer, like every other pointer of the module
        gv.linkage = "external"
        gv.align = shared_plan(cg.program).base_align
    return gv


def shared_scratch(cg: KernelContext) -> ir.Value:
    """A pointer to the plan's 16 bytes of scratch in the dynamic buffer (a program with
    an instruction that needs it has them)."""
    offset = shared_plan(cg.program).scratch_offset
    if offset is None:
        raise cg.fail(f"{cg.inst.opname if cg.inst else 'this'} needs shared scratch, which "
                      "the shared-memory plan did not reserve")
    return cg.b.gep(shared_base(cg), [ir.Constant(I32, offset)], source_etype=I8)


def allocation(cg: KernelContext, tensor: Tensor) -> tuple[Allocation, SharedLayout]:
    """A shared tensor's place in the plan and its layout (of whole-byte elements)."""
    alloc = shared_plan(cg.program).allocations.get(tensor.name)
    layout = tensor.layout
    if alloc is None or not isinstance(layout, SharedLayout):
        raise cg.fail(f"shared tensor %{tensor.name} has no planned offset and layout (run "
                      "plan_shared_memory)")
    if layout.element_bits % 8:
        raise cg.fail(f"shared tensors of {layout.element_bits}-bit elements "
                      f"(%{tensor.name}: {tensor.dtype}) are not supported by the GPU backend "
                      "yet")
    return alloc, layout
