"""Pass `vectorize_memory`: choose the widest legal vector for every memory access.

Expects: a program after `plan_shared_memory` (register tensors have `RegisterLayout`s,
shared tensors `SharedLayout`s). Guarantees: every `load_global`, `store_global`,
`load_shared`, `store_shared` and `copy_async` carries
a lowering, and nothing else changes:

- register <-> memory: `lowering=vector(elements=W, bytes=B)`: codegen accesses groups of
  `W` consecutive registers as one `B`-byte vector, `B <= 16` (`W = 1`: scalar);
- `copy_async`: `lowering=chunk(elements=W, bytes=B, dim=D)`, `B` in {16, 8, 4}: the tile
  is copied in chunks of `W` consecutive elements along dimension `D` (`select_instructions`
  makes each a `cp.async`), or `lowering=elementwise` when no chunk is provably aligned.

Legality is proven, never assumed (`ProgramPoint.divisor` for runtime values):

- register <-> global (`load_global`, `store_global`): registers `l..l+W-1` (`l` a
  multiple of `W`) hold `W` consecutive elements of the last dimension, which has unit
  stride in the view; every thread's first coordinate, the tile offset, the view's
  offset and its other strides are multiples of `W`. A vector that straddles a ragged
  edge is done element by element at run time (masked tail); a whole one is one
  `ld/st.global.vN`.
- register <-> shared (`load_shared`, `store_shared`): the same, along any dimension of
  unit stride in the shared layout, and not wider than the swizzle's unit (a swizzle
  moves `unit_bytes` chunks; a vector must not be split by it).
- global -> shared (`copy_async`): chunks of 16, 8 or 4 bytes along one dimension `D`
  of unit stride in both the view and the shared layout: the last dimension when it
  qualifies, else another (the innermost that does; e.g. dimension 0 of a transposed
  staging copy, global strides `[1, K]` into a tile with shared strides `(1, bk)`).
  The chunk is aligned in both memories: the view's offset, the tile offset along `D`,
  the view's other strides and the shared layout's other strides are multiples of `W`,
  `D`'s extent in the tile is a multiple of `W`, and the swizzle's unit is at least `B`
  bytes; `elementwise` when no chunk is provable (then threads copy element by
  element).
"""

from __future__ import annotations

from dataclasses import replace

from tilevm.backend.analysis.divisibility import ProgramPoint, rewrite_instructions
from tilevm.backend.analysis.vectors import copy_chunk, global_vector, shared_vector
from tilevm.backend.passes.context import DEFAULT_CONTEXT, PassContext
from tilevm.ir import instructions as ins
from tilevm.ir.stmt import Program


def vectorize_memory(program: Program, context: PassContext = DEFAULT_CONTEXT) -> Program:
    return rewrite_instructions(program, _choose)


def _choose(inst: ins.Instruction, point: ProgramPoint) -> ins.Instruction:
    width = None
    if isinstance(inst, ins.LoadGlobal):
        width = global_vector(point, point.view(inst.src), inst.out, inst.offsets)
        dtype = inst.src.dtype
    elif isinstance(inst, ins.StoreGlobal):
        width = global_vector(point, point.view(inst.dst), inst.src, inst.offsets)
        dtype = inst.dst.dtype
    elif isinstance(inst, ins.LoadShared):
        width = shared_vector(point, inst.src.layout, inst.out.layout, inst.offsets)
        dtype = inst.src.dtype
    elif isinstance(inst, ins.StoreShared):
        width = shared_vector(point, inst.dst.layout, inst.src.layout, inst.offsets)
        dtype = inst.dst.dtype
    elif isinstance(inst, ins.CopyAsync):
        chunk = copy_chunk(point, inst.dst.layout, point.view(inst.src), inst.offsets)
        if chunk is None:
            return replace(inst, lowering=ins.lowering("elementwise"))
        n, dim = chunk
        return replace(inst, lowering=ins.lowering(
            "chunk", elements=n, bytes=n * inst.dst.dtype.bits // 8, dim=dim))
    if width is None:
        return inst
    return replace(inst, lowering=ins.lowering(
        "vector", elements=width, bytes=width * max(dtype.bits // 8, 1)))
