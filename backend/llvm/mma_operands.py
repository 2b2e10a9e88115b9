"""The operands of tensor-core instructions in LLVM IR: a register tile divided into an
instruction's fragments (`split_fragments`), the per-warp register plan that must be the
same in every warp (`same_in_every_warp`), and an operand's 32-bit registers
(`operand_registers`). Shared by the `mma.sync` and the wgmma lowerings."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import llvmlite.ir as ir

from tilevm.backend.analysis.packing import is_packed
from tilevm.backend.llvm.context import KernelContext
from tilevm.backend.llvm.types import I32, llvm_type
from tilevm.dtypes import DataType
from tilevm.ir.types import Tensor
from tilevm.layouts import LayoutError, RegisterLayout, divide

T = TypeVar("T")


def split_fragments(cg: KernelContext, name: str, layout: RegisterLayout,
                    fragment: RegisterLayout, wanted: RegisterLayout | None
                    ) -> RegisterLayout:
    """X with `layout == X * fragment`, or a clear error."""
    try:
        return divide(layout, fragment)
    except LayoutError:
        hint = f"; the tensor-core tiling is {wanted}" if wanted is not None else ""
        raise cg.fail(f"dot: {name} has layout {layout}, which is not made of mma "
                      f"fragments {fragment}{hint}; layout conversion not supported yet"
                      ) from None


def same_in_every_warp(cg: KernelContext, num_warps: int, plan_of: Callable[[int], T]) -> T:
    """`plan_of(w)`, which must be the same for every warp `w`: registers are indexed at
    compile time, so every warp must find its fragments at the same local indices."""
    plan = plan_of(0)
    for w in range(1, num_warps):
        if plan_of(w) != plan:
            raise cg.fail(f"dot: warp {w} holds its mma fragments in other registers than "
                          "warp 0; layout conversion not supported yet")
    return plan


def operand_registers(cg: KernelContext, tensor: Tensor) -> list[ir.Value]:
    """The 32-bit mma registers of each fragment of an operand, concatenated: 8-bit
    operands already live packed (pass `lower_bit_packing`) in exactly this order."""
    if is_packed(tensor.dtype):
        return cg.register_words(tensor)
    return _pack(cg, cg.register_values(tensor), tensor.dtype)


def _pack(cg: KernelContext, values: list[ir.Value], dtype: DataType) -> list[ir.Value]:
    """Elements -> 32-bit registers, `32 / bits` each, the first in the low bits."""
    per = 32 // dtype.bits
    vec_ty = ir.VectorType(llvm_type(dtype), per)
    regs = []
    for start in range(0, len(values), per):
        vec = ir.Constant(vec_ty, ir.Undefined)
        for i, v in enumerate(values[start:start + per]):
            vec = cg.b.insert_element(vec, v, ir.Constant(I32, i))
        regs.append(cg.b.bitcast(vec, I32))
    return regs
