"""Layouts: which thread holds which tile element (register layouts), where each byte
sits in shared memory (shared layouts, swizzles), and views over global memory.

    >>> from tilevm.layouts import local, spatial
    >>> layout = local(2, 1).spatial(8, 4).local(1, 2)      # a 16x8 tile over 32 threads
    >>> layout.global_index(thread=5, local=3)
    (9, 3)

docs/layouts.md describes the algebra, its laws and the text syntax.
"""

from tilevm.layouts import picture, symbolic
from tilevm.layouts.errors import LayoutError
from tilevm.layouts.expression import parse_layout
from tilevm.layouts.fragments import (
    ldmatrix,
    mma_m16n8k16_a,
    mma_m16n8k16_b,
    mma_m16n8k16_c,
    mma_m16n8k32_a,
    mma_m16n8k32_b,
    mma_m16n8k32_c,
)
from tilevm.layouts.global_layout import GlobalLayout
from tilevm.layouts.linear import (
    LinearMap,
    contiguous_local_bits,
    from_linear,
    to_linear,
    vector_width,
)
from tilevm.layouts.register_bits import (
    BitSlot,
    bit_slot,
    bits_per_thread,
    check_view,
    registers_per_thread,
    view_is_legal,
)
from tilevm.layouts.register_layout import (
    RegisterLayout,
    column_local,
    column_spatial,
    concat,
    divide,
    left_divide,
    local,
    replicated,
    spatial,
)
from tilevm.layouts.shared_layout import (
    SharedLayout,
    bank_conflicts,
    column_major,
    ldmatrix_conflict_free,
    row_major,
    swizzled,
)
from tilevm.layouts.swizzle import Swizzle

__all__ = [
    "LayoutError", "RegisterLayout", "column_local", "column_spatial", "concat", "divide",
    "left_divide", "local", "replicated", "spatial", "Swizzle", "SharedLayout",
    "bank_conflicts", "column_major", "ldmatrix_conflict_free", "row_major", "swizzled",
    "GlobalLayout", "symbolic", "LinearMap", "contiguous_local_bits", "from_linear",
    "to_linear", "vector_width", "BitSlot", "bit_slot", "bits_per_thread", "check_view",
    "registers_per_thread", "view_is_legal", "ldmatrix", "mma_m16n8k16_a", "mma_m16n8k16_b",
    "mma_m16n8k16_c", "mma_m16n8k32_a", "mma_m16n8k32_b", "mma_m16n8k32_c", "picture",
    "parse_layout",
]
