"""Which bytes of a tensor a set of tiles covers, exactly: the geometry under the DRAM
model of `cost.dram`.

A tile of a global view is a box of view coordinates (`Box`: per dimension `[lo, hi)`).
Boxes of one view merge where they touch along one dimension (`merge_box`), so a loop's
k-tiles of a row panel become the panel. In memory (bit addresses of the tensor) a box
clipped to the view is a set of rows of one pitch: `memory_pieces` folds the
dimensions that lie contiguously into one run, and gives the box as `Piece`s (a base
address, then (stride, count) dimensions, the last a contiguous run of bits). A tensor's
pieces are drawn on one plane of `pitch` bits (address a at row a // pitch, column
a % pitch), where a piece of that pitch is one rectangle and any other piece is its
rows (`Plane.rectangles`); `union_area` measures a union of rectangles exactly.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Box", "Piece", "Rect", "Plane", "merge_box", "memory_pieces", "union_area",
           "plane_for"]

Box = tuple[tuple[int, ...], tuple[int, ...]]  # (lo, hi) per dimension, view coordinates


@dataclass(frozen=True)
class Piece:
    """Bits `base + sum(i_d * stride_d) + j` for `i_d < count_d` and `j < run`: a box in
    memory; `dims` outermost first, strides larger than the run (no self-overlap)."""

    base: int
    dims: tuple[tuple[int, int], ...]  # (stride, count), in bits
    run: int  # contiguous bits


@dataclass(frozen=True, order=True)
class Rect:
    """Rows `[r0, r1)` and columns `[c0, c1)` of a plane (bits)."""

    r0: int
    r1: int
    c0: int
    c1: int


def merge_box(boxes: list[Box], box: Box) -> None:
    """Add `box` to `boxes` (in place), merged with a box it extends: the two equal but
    along one dimension, where they touch or overlap. A box inside another adds nothing."""
    lo, hi = box
    changed = True
    while changed:
        changed = False
        for i, (olo, ohi) in enumerate(boxes):
            if all(a <= c and d <= b for a, b, c, d in zip(olo, ohi, lo, hi)):
                return  # inside
            differ = [d for d in range(len(lo)) if (lo[d], hi[d]) != (olo[d], ohi[d])]
            if len(differ) == 1 and lo[differ[0]] <= ohi[differ[0]] and \
                    olo[differ[0]] <= hi[differ[0]]:
                d = differ[0]
                lo = (*lo[:d], min(lo[d], olo[d]), *lo[d + 1:])
                hi = (*hi[:d], max(hi[d], ohi[d]), *hi[d + 1:])
                del boxes[i]
                changed = True
                break
    boxes.append((lo, hi))


def memory_pieces(offset: int, shape: tuple[int, ...], strides: tuple[int, ...], bits: int,
                  box: Box) -> Piece | None:
    """The bits a box of a view (`offset`, `shape`, `strides` in elements of `bits`)
    covers inside the view's bounds; None if none."""
    lo, hi = box
    base = offset
    dims: list[tuple[int, int]] = []
    for a, b, n, stride in zip(lo, hi, shape, strides):
        a, b = max(a, 0), min(b, n)
        if b <= a:
            return None
        base += a * stride
        if b - a > 1 and stride:
            dims.append((abs(stride) * bits, b - a))
            if stride < 0:
                base += (b - a - 1) * stride
    dims.sort(reverse=True)
    run = bits
    # fold the innermost dimensions that continue the run
    while dims and dims[-1][0] == run:
        run *= dims.pop()[1]
    # and the outer ones that continue each other
    folded: list[tuple[int, int]] = []
    for stride, count in reversed(dims):
        if folded and stride == folded[-1][0] * folded[-1][1]:
            folded[-1] = (folded[-1][0], folded[-1][1] * count)
        else:
            folded.append((stride, count))
    return Piece(base * bits, tuple(reversed(folded)), run)


class Plane:
    """A tensor's bits drawn as rows of `pitch` bits."""

    def __init__(self, pitch: int) -> None:
        self.pitch = pitch
        self._made: dict[Piece, tuple[Rect, ...]] = {}

    def rectangles(self, piece: Piece) -> tuple[Rect, ...]:
        found = self._made.get(piece)
        if found is None:
            found = self._made[piece] = tuple(self._rectangles(piece))
        return found

    def _rectangles(self, piece: Piece) -> Iterable[Rect]:
        p = self.pitch
        if len(piece.dims) == 1 and piece.dims[0][0] == p and piece.base % p + piece.run <= p:
            row, column = divmod(piece.base, p)
            yield Rect(row, row + piece.dims[0][1], column, column + piece.run)
            return
        starts = [piece.base]
        for stride, count in piece.dims:
            starts = [s + i * stride for s in starts for i in range(count)]
        for start in starts:
            yield from self._interval(start, start + piece.run)

    def _interval(self, a: int, b: int) -> Iterable[Rect]:
        p = self.pitch
        (r0, c0), (r1, c1) = divmod(a, p), divmod(b, p)
        if r0 == r1:
            yield Rect(r0, r0 + 1, c0, c1)
            return
        yield Rect(r0, r0 + 1, c0, p)
        if r1 > r0 + 1:
            yield Rect(r0 + 1, r1, 0, p)
        if c1:
            yield Rect(r1, r1 + 1, 0, c1)


def plane_for(pieces: Iterable[Piece]) -> Plane:
    """The plane of a tensor's pieces: the pitch of most of its two-dimensional pieces
    (each is then one rectangle), or of its outermost stride; one long row if none."""
    pitches = Counter(p.dims[0][0] for p in pieces if len(p.dims) == 1)
    if pitches:
        return Plane(pitches.most_common(1)[0][0])
    return Plane(1 << 62)


def union_area(rects: Iterable[Rect]) -> int:
    """The bits a union of rectangles covers: per strip between consecutive column
    edges, the length of the union of the row intervals over the strip."""
    unique = set(rects)
    if not unique:
        return 0
    edges = sorted({c for r in unique for c in (r.c0, r.c1)})
    strips: list[list[tuple[int, int]]] = [[] for _ in range(len(edges) - 1)]
    for r in unique:
        for i in range(bisect_left(edges, r.c0), bisect_left(edges, r.c1)):
            strips[i].append((r.r0, r.r1))
    area = 0
    for i, rows in enumerate(strips):
        if rows:
            area += (edges[i + 1] - edges[i]) * _covered(rows)
    return area


def _covered(intervals: list[tuple[int, int]]) -> int:
    intervals.sort()
    total, end = 0, None
    for a, b in intervals:
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total
