"""`KernelBuilder`: llvmlite's IR builder, with every call to inline PTX `convergent`.

Why: most of the inline PTX the lowerings write is warp-synchronous (`bar.warp.sync`,
`mbarrier.*`, `wgmma.*`, `elect.sync`, barriers), and LLVM knows nothing of that unless
the call says so. Without the attribute its optimizer may duplicate such a call into
both arms of a branch that divides a warp (jump threading merged a `bar.warp.sync`, lane
0's `mbarrier.arrive` and the next `bar.warp.sync` into one lane-0 arm); ptxas then has
to run it through its emulation for divided warps (`BRA.DIV` to `WARPSYNC.COLLECTIVE`),
which waits for the warp's outstanding loads at every such point. clang marks every
inline asm statement of CUDA code convergent for the same reason; so do we, for all of
it, rather than decide per instruction which PTX is warp-synchronous.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import llvmlite.ir as ir


class KernelBuilder(ir.IRBuilder):
    """The builder of a kernel's function (`KernelContext.b`)."""

    def call(self, fn: Any, args: Sequence[ir.Value], name: str = "", cconv: Any = None,
             tail: bool = False, fastmath: Any = (), attrs: Any = (),
             arg_attrs: Any = None) -> ir.CallInstr:
        if isinstance(fn, ir.InlineAsm):
            attrs = (*((attrs,) if isinstance(attrs, str) else attrs), "convergent")
        return super().call(fn, args, name, cconv, tail, fastmath, attrs, arg_attrs)
