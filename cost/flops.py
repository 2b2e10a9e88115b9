"""The arithmetic an instruction does, by the unit that does it: the cost model's FLOP rules.

One table, by instruction (per execution, for the whole block):

| instruction | unit | count |
|---|---|---|
| `dot` a[m, k] @ b[k, n] | "tensor_core" | 2 m n k (a multiply and an add per product) |
| `elementwise` | "fma" | 1 per output element (`fma`: 2, its multiply and add) |
| `where` | "fma" | 1 per output element (a select) |
| `reduce` | "fma" | 1 per source element |
| `cast` from or to a type of at most 8 bits | "convert" | 1 per element converted |
| any other `cast` (f16 <-> f32, ...) | "fma" | 1 per element |
| `cast` to its own type (a copy) | | none |

A `dot` whose `b` is in registers lowers to the warp-level `mma.sync`, one whose `b` is
shared to Hopper's warpgroup `wgmma`: its FLOPs count under "tensor_core" either way, and
those of `mma.sync` under "mma_sync" too (`FLOP_COUNTS`), for the model to time them at
that instruction's own rate (`GPU.mma_sync_fraction`).

Every other instruction (moves, views, fills, copies, barriers) does no arithmetic. The
"fma" unit stands for the SM's scalar pipes as a whole: transcendental functions
(`exp2`, `rsqrt`) and comparisons count there too, one each, since the model bounds
time by the busiest unit and these are a small share of any kernel it is meant for.
"""

from __future__ import annotations

from tilevm.ir.instructions import Cast, Dot, Elementwise, Instruction, Reduce, Where
from tilevm.ir.types import MemorySpace

UNITS = ("tensor_core", "fma", "convert")
# What the walk counts: the units, and of "tensor_core" the part `mma.sync` does.
FLOP_COUNTS = (UNITS[0], "mma_sync", *UNITS[1:])
LOW_BIT = 8  # a cast from or to a type this narrow is a conversion ("convert")


def instruction_flops(inst: Instruction) -> dict[str, int]:
    """The operations one execution of `inst` does, by `FLOP_COUNTS` key (empty: no
    arithmetic)."""
    if isinstance(inst, Dot):  # (with b's g matrices: each of m / g rows)
        m, n, k = inst.mnk
        flops = 2 * m * n * k
        warp_level = inst.b.space is not MemorySpace.SHARED
        return {"tensor_core": flops, **({"mma_sync": flops} if warp_level else {})}
    if isinstance(inst, Elementwise):
        return {"fma": inst.out.type.num_elements * (2 if inst.op == "fma" else 1)}
    if isinstance(inst, Where):
        return {"fma": inst.out.type.num_elements}
    if isinstance(inst, Reduce):
        return {"fma": inst.src.type.num_elements}
    if isinstance(inst, Cast) and inst.src.dtype != inst.out.dtype:
        low = min(inst.src.dtype.bits, inst.out.dtype.bits) <= LOW_BIT
        return {"convert" if low else "fma": inst.out.type.num_elements}
    return {}
