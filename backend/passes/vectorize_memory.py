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

from tilevm.backend.divisibility import ProgramPoint, rewrite_instructions
from tilevm.ir import instructions as ins
from tilevm.ir.expr import Const, Expr
from tilevm.ir.stmt import Program
from tilevm.ir.types import Tensor
from tilevm.layouts import RegisterLayout
from tilevm.layouts.shared_layout import SharedLayout

VECTOR_BYTES = 16


def vectorize_memory(program: Program) -> Program:
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


def global_vector(point: ProgramPoint, view: ins.GlobalView, tile: Tensor,
                  offsets: tuple[Expr, ...]) -> int:
    """Registers per vector for a register tile accessed through a global view."""
    layout = tile.layout
    if not isinstance(layout, RegisterLayout) or view.out.dtype.bits % 8:
        return 1
    if not (isinstance(view.strides[-1], Const) and view.strides[-1].value == 1):
        return 1
    locals_ = [layout.global_index(0, l) for l in range(layout.local_size)]
    threads = [layout.global_index(t, 0)[-1] for t in range(layout.num_threads)]
    width = VECTOR_BYTES // (view.out.dtype.bits // 8)
    while width > 1:
        runs = layout.local_size % width == 0 and all(
            locals_[l + i][:-1] == locals_[l][:-1] and
            locals_[l + i][-1] == locals_[l][-1] + i and locals_[l][-1] % width == 0
            for l in range(0, layout.local_size, width) for i in range(width))
        aligned = all(t % width == 0 for t in threads) and all(
            point.divisor(e) % width == 0
            for e in (view.offset, offsets[-1], *view.strides[:-1]))
        if runs and aligned:
            return width
        width //= 2
    return 1


def shared_vector(point: ProgramPoint, layout: SharedLayout, reg: RegisterLayout,
                  offsets: tuple[Expr, ...]) -> int:
    """Registers per vector for a register tile accessed in shared memory."""
    if not isinstance(layout, SharedLayout) or not isinstance(reg, RegisterLayout) \
            or layout.element_bits % 8:
        return 1
    elem = layout.element_bits // 8
    limit = VECTOR_BYTES // elem
    if layout.swizzle is not None:
        limit = min(limit, layout.swizzle.unit_bytes // elem)
    locals_ = [reg.global_index(0, l) for l in range(reg.local_size)]
    threads = [reg.global_index(t, 0) for t in range(reg.num_threads)]
    width = 1 << (max(limit, 1).bit_length() - 1)
    while width > 1:
        for d in range(layout.rank):
            if layout.strides[d] != 1 or reg.local_size % width:
                continue
            unit = tuple(int(i == d) for i in range(layout.rank))
            runs = all(locals_[l + i] == tuple(c + i * u for c, u in zip(locals_[l], unit))
                       and locals_[l][d] % width == 0
                       for l in range(0, reg.local_size, width) for i in range(width))
            aligned = (all(t[d] % width == 0 for t in threads)
                       and point.divisor(offsets[d]) % width == 0
                       and all(s % width == 0 for k, s in enumerate(layout.strides) if k != d))
            if runs and aligned:
                return width
        width //= 2
    return 1


def chunk_dim(form: ins.Lowering, rank: int) -> int:
    """The dimension a `copy_async` lowering (`chunk`, `cp_async`, `load_store`) copies
    along: its `dim`, or the last dimension where it has none (the plain fallback, and IR
    printed before chunks could run along another dimension)."""
    return int(dict(form.params).get("dim", rank - 1))


def copy_chunk(point: ProgramPoint, layout: SharedLayout, view: ins.GlobalView,
               offsets: tuple[Expr, ...]) -> tuple[int, int] | None:
    """`(elements, dim)` of a provable `copy_async` chunk (16, 8 or 4 bytes along `dim`),
    or None when there is none.

    `dim` must be contiguous in both memories: unit stride in the view and in the shared
    layout (or extent 1 there). The last dimension is tried first, then the others from
    the innermost out, so a row-major copy keeps its chunks along the rows and a transposed
    staging copy (global strides `[1, K]` into a tile whose dimension 0 is contiguous)
    gets them along dimension 0.
    """
    if not isinstance(layout, SharedLayout) or layout.element_bits % 8:
        return None
    elem = layout.element_bits // 8
    for d in reversed(range(layout.rank)):
        if not (isinstance(view.strides[d], Const) and view.strides[d].value == 1):
            continue
        if layout.strides[d] != 1 and layout.shape[d] != 1:
            continue
        others = [k for k in range(layout.rank) if k != d]
        for size in (16, 8, 4):
            n = size // elem
            if size % elem or n < 1 or layout.shape[d] % n:
                continue
            if layout.swizzle is not None and layout.swizzle.unit_bytes < size:
                continue  # the swizzle would split the chunk
            if any(layout.strides[k] % n for k in others):
                continue
            if all(point.divisor(e) % n == 0
                   for e in (view.offset, offsets[d], *(view.strides[k] for k in others))):
                return n, d
    return None
