"""Pass `vectorize_memory`: choose the widest legal vector for every memory access.

Expects: a program after `plan_shared_memory` (register tensors have `RegisterLayout`s,
shared tensors `SharedLayout`s). Guarantees: every `load_global`, `store_global`,
`load_shared`, `store_shared` and `copy_async` carries
a lowering, and nothing else changes:

- register <-> memory: `lowering=vector(elements=W, bytes=B)`: codegen accesses groups of
  `W` consecutive registers as one `B`-byte vector, `B <= 16` (`W = 1`: scalar);
- `copy_async`: `lowering=chunk(elements=W, bytes=B)`, `B` in {16, 8, 4}: the tile is
  copied in chunks of `W` consecutive elements (`select_instructions` makes each a
  `cp.async`), or `lowering=elementwise` when no chunk is provably aligned.

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
- global -> shared (`copy_async`): chunks of 16, 8 or 4 bytes of the last dimension,
  aligned in both memories (the view's offset, the tile offset, the other strides, the
  shared strides and the swizzle unit); `W = 1` when none is provable (then threads
  copy element by element).
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
        n = copy_chunk(point, inst.dst.layout, point.view(inst.src), inst.offsets)
        return replace(inst, lowering=ins.lowering(
            "chunk", elements=n, bytes=n * inst.dst.dtype.bits // 8) if n else
            ins.lowering("elementwise"))
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


def copy_chunk(point: ProgramPoint, layout: SharedLayout, view: ins.GlobalView,
               offsets: tuple[Expr, ...]) -> int:
    """Elements per `copy_async` chunk (16, 8 or 4 bytes), or 0 when none is provable."""
    if not isinstance(layout, SharedLayout) or layout.element_bits % 8:
        return 0
    elem = layout.element_bits // 8
    last = layout.rank - 1
    if not (isinstance(view.strides[-1], Const) and view.strides[-1].value == 1):
        return 0
    if layout.strides[last] != 1 and layout.shape[last] != 1:
        return 0
    for size in (16, 8, 4):
        n = size // elem
        if size % elem or n < 1 or layout.shape[last] % n:
            continue
        if layout.swizzle is not None and layout.swizzle.unit_bytes < size:
            continue
        if any(s % n for s in layout.strides[:last]):
            continue
        if all(point.divisor(e) % n == 0
               for e in (view.offset, offsets[-1], *view.strides[:-1])):
            return n
    return 0
