"""Pass `plan_shared_memory`: give every shared tensor a layout, and check that the
block's shared tensors fit its one dynamic shared-memory buffer.

Expects: a verified program (after `infer_layouts`). Guarantees: every shared tensor
(definition and uses) has a `SharedLayout` (`default_shared_layout` for one created
without a layout), and `shared_plan` of the result places every `alloc_shared` tensor
(analysis/shared_memory.py says where and what the plan guarantees). The plan is not
stored in the IR: it is a fact of the program, computed once per program object, which
the later passes, codegen and the pipeline read.
"""

from __future__ import annotations

from tilevm.backend.analysis.shared_memory import default_shared_layout, shared_plan
from tilevm.backend.passes.context import DEFAULT_CONTEXT, PassContext
from tilevm.ir.stmt import Program
from tilevm.ir.transform import map_tensors
from tilevm.ir.types import MemorySpace, Tensor
from tilevm.layouts.shared_layout import SharedLayout


def plan_shared_memory(program: Program, context: PassContext = DEFAULT_CONTEXT) -> Program:
    """The program with a `SharedLayout` on every shared tensor (see the module docstring)."""
    chosen: dict[str, SharedLayout] = {}

    def with_layout(t: Tensor) -> Tensor:
        if t.space is not MemorySpace.SHARED or t.layout is not None:
            return t
        if t.name not in chosen:
            chosen[t.name] = default_shared_layout(t)
        return Tensor(t.name, t.type.with_layout(chosen[t.name]))

    out = map_tensors(program, with_layout)
    shared_plan(out)  # every tensor can be placed
    return out
