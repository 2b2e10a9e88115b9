"""Vector widths: the widest access a register tile, or a `copy_async` chunk, can make
with legality proven from the program (`ProgramPoint.divisor` for runtime values), and
the dimension a `copy_async` form copies along. Pass `vectorize_memory` records these
in each access's `lowering`; its docstring states the rules.
"""

from __future__ import annotations

from tilevm.backend.analysis.divisibility import ProgramPoint
from tilevm.ir import instructions as ins
from tilevm.ir.expr import Const, Expr
from tilevm.ir.types import Tensor
from tilevm.layouts import RegisterLayout
from tilevm.layouts.shared_layout import SharedLayout

VECTOR_BYTES = 16


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
