"""The DRAM bytes of a launch: its blocks' footprints (`cost.footprint`) run in waves
through an L2 of `l2_bytes`.

The rule (docs/cost-model.md tells it with the examples):

- Blocks start in launch order (`blockIdx.x` fastest, then y, then z), in waves of
  `blocks_per_wave` (the SMs times the blocks an SM holds).
- Within a wave, a byte that several blocks read is fetched from DRAM once: the blocks
  of a wave run at once and move through their loops at about the same pace, so what
  one fetches the others find in L2. A wave reads the union of its blocks' reads.
- Across waves, a byte that an earlier wave touched (read or written) is still in L2
  with a probability that falls linearly with its reuse distance d, the distinct bytes
  the waves since touched: 1 - d / `l2_bytes`, none once d reaches `l2_bytes`. For a
  byte last touched in wave w - j, d is what waves w - j, ..., w - 1 touched together
  (the blocks move through their loops in about the same order in every wave, so the
  byte touched at some point of wave w - j is touched again at that point of wave w,
  after the rest of those waves' bytes). An LRU cache of exactly `l2_bytes` would keep
  every byte with d below it and none above; measured L2 traffic (docs/cost-model.md)
  falls off gradually instead: the blocks of a wave drift apart, and L2 is split into
  partitions and hashed sets. The linear fall is an LRU cache whose capacity is
  anywhere between none and `l2_bytes`, with no constant fitted.
- Each written byte reaches DRAM once (the union of the launch's writes). A wave's
  reads of bytes it wrote itself are not fetched (split-K partial sums read back by a
  tile's last block); bytes an earlier wave wrote are kept as the rule above says. A
  kernel that reads a byte before it writes it in the same wave (an update in place)
  is undercounted by those reads.
- Where the launch's whole footprint fits in L2, nothing is evicted: each byte is read
  once, except those it writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from tilevm.cost.footprint import BlockFootprint
from tilevm.cost.regions import Piece, Plane, Rect, plane_for, union_area

__all__ = ["DramEstimate", "dram_estimate", "MAX_LOOKBACK"]

MAX_LOOKBACK = 16  # earlier waves a wave's L2 is looked for in (more: approximate)


@dataclass(frozen=True)
class DramEstimate:
    """Per pointer, in bits: `read` (fetched from DRAM), `written` (reaching it),
    `footprint` (distinct bits touched); `approximate`: a block's footprint was, or the
    lookback was cut at `MAX_LOOKBACK` waves."""

    read: Mapping[str, int]
    written: Mapping[str, int]
    footprint: Mapping[str, int]
    approximate: bool


def dram_estimate(footprints: Sequence[BlockFootprint] | Callable[[int], BlockFootprint],
                  blocks: int, blocks_per_wave: int, l2_bytes: int) -> DramEstimate:
    """The estimate of the module docstring for `blocks` blocks whose footprints, in
    launch order, `footprints` gives (a sequence, or a function of the block's linear
    index)."""
    if blocks_per_wave < 1:
        raise ValueError(f"blocks_per_wave must be at least 1, got {blocks_per_wave}")
    get = footprints if callable(footprints) else footprints.__getitem__
    blocks_fp = [get(i) for i in range(blocks)]
    planes = _planes(blocks_fp)
    waves = []  # per wave, per pointer: the rectangles read, written, touched
    for first in range(0, blocks, blocks_per_wave):
        wave: tuple[dict[str, set[Rect]], ...] = ({}, {}, {})
        for fp in blocks_fp[first:first + blocks_per_wave]:
            for side, into in ((fp.reads, wave[0]), (fp.writes, wave[1])):
                for pointer, pieces in side.items():
                    rects = _rects(planes[pointer], pieces)
                    into.setdefault(pointer, set()).update(rects)
                    wave[2].setdefault(pointer, set()).update(rects)
        waves.append(wave)
    approximate = any(fp.approximate for fp in blocks_fp)
    pointers = sorted(planes)
    footprint = {p: union_area(r for w in waves for r in w[2].get(p, ())) for p in pointers}
    written = {p: union_area(r for w in waves for r in w[1].get(p, ())) for p in pointers}
    if sum(footprint.values()) <= 8 * l2_bytes:  # all of it stays: each byte read once
        read = {p: footprint[p] - written[p] for p in pointers}
        return DramEstimate(read, written, footprint, approximate)
    fetched = dict.fromkeys(pointers, 0.0)
    capacity = 8 * l2_bytes
    for w, (reads, writes, _) in enumerate(waves):
        # missed[p]: the bits of p's reads that no wave since w - j touched (nor this
        # wave wrote); those first found in wave w - j are kept at 1 - d_j / capacity
        missed = {p: _missed(rects, writes.get(p, set())) for p, rects in reads.items()}
        for p, bits in missed.items():
            fetched[p] += bits
        since: dict[str, set[Rect]] = {}  # what waves w - j, ..., w - 1 touched
        for j in range(1, w + 1):
            if j > MAX_LOOKBACK:
                approximate = True
                break
            for p, rects in waves[w - j][2].items():
                since.setdefault(p, set()).update(rects)
            distance = sum(union_area(r) for r in since.values())
            if distance >= capacity:
                break
            kept = 1 - distance / capacity
            for p, rects in reads.items():
                still = _missed(rects, since.get(p, set()) | writes.get(p, set()))
                fetched[p] -= kept * (missed[p] - still)
                missed[p] = still
    read = {p: round(bits) for p, bits in fetched.items()}
    return DramEstimate(read, written, footprint, approximate)


def _missed(rects: set[Rect], kept: set[Rect]) -> int:
    """The bits of `rects` outside `kept`."""
    return union_area(rects | kept) - union_area(kept)


def _planes(blocks_fp: Sequence[BlockFootprint]) -> dict[str, Plane]:
    pieces: dict[str, list[Piece]] = {}
    for fp in blocks_fp:
        for side in (fp.reads, fp.writes):
            for pointer, found in side.items():
                pieces.setdefault(pointer, []).extend(found)
    return {p: plane_for(found) for p, found in pieces.items()}


def _rects(plane: Plane, pieces: Iterable[Piece]) -> list[Rect]:
    return [r for piece in pieces for r in plane.rectangles(piece)]
