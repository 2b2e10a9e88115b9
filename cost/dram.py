"""The DRAM bytes of a launch: its blocks' footprints (`cost.footprint`) run in waves
through an L2 of `l2_bytes`.

The rule (docs/cost-model.md tells it with the examples):

- Blocks start in launch order (`blockIdx.x` fastest, then y, then z), in waves of
  `blocks_per_wave` (the SMs times the blocks an SM holds).
- Within a wave, a byte that several blocks read is fetched from DRAM once: the blocks
  of a wave run at once and move through their loops at about the same pace, so what
  one fetches the others find in L2. A wave reads the union of its blocks' reads.
- Across waves, L2 keeps the most recent `l2_bytes` of distinct data: at the start of
  wave w it holds what waves w - 1, ..., w - j touched (read or written), for the
  largest j whose union fits, and fills the room left with an even share of the other
  bytes of wave w - j - 1 (the order of a wave's bytes is not known: each is as likely
  to be kept). A byte wave w reads that L2 holds is not fetched again, and a byte of
  that older wave counts as fetched in the fraction not kept. (With the blocks moving
  through their loops in step, a byte touched in wave w - j at some point of the loop
  is touched again at the same point of wave w, after the rest of those waves' bytes.)
- Each written byte reaches DRAM once (the union of the launch's writes), and a byte
  the launch writes is then in L2: a wave's reads of bytes that it or a wave L2 holds
  wrote are not fetched (split-K partial sums read back by a tile's last block). A
  kernel that reads a byte before it writes it in the same wave (an update in place)
  is undercounted by those reads.

Where the launch's whole footprint fits in L2 this reads each byte once, except those
it writes.
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
    for w, (reads, writes, _) in enumerate(waves):
        (held, held_bits), (older, older_bits), cut = _held(waves, w, 8 * l2_bytes)
        approximate |= cut
        # the share of the older wave's other bits that L2 has room for
        share = (8 * l2_bytes - held_bits) / (older_bits - held_bits) if older else 0.0
        for p, rects in reads.items():
            missed = _missed(rects, held.get(p, set()) | writes.get(p, set()))
            if older:
                in_older = missed - _missed(rects, older.get(p, set()) | writes.get(p, set()))
                missed -= share * in_older
            fetched[p] += missed
    read = {p: round(bits) for p, bits in fetched.items()}
    return DramEstimate(read, written, footprint, approximate)


def _missed(rects: set[Rect], kept: set[Rect]) -> int:
    """The bits of `rects` outside `kept`."""
    return union_area(rects | kept) - union_area(kept)


Held = tuple[dict[str, set[Rect]], int]  # per pointer the rectangles; their bits


def _held(waves: list[tuple[dict[str, set[Rect]], ...]], w: int, capacity_bits: int
          ) -> tuple[Held, Held, bool]:
    """At the start of wave `w`: what the most recent waves that fit in L2 touched, and
    with the next older wave (empty if none is left out), and whether the lookback was
    cut short."""
    held: Held = ({}, 0)
    union: dict[str, set[Rect]] = {}
    for j in range(1, min(w, MAX_LOOKBACK) + 1):
        for p, rects in waves[w - j][2].items():
            union.setdefault(p, set()).update(rects)
        bits = sum(union_area(r) for r in union.values())
        if bits > capacity_bits:
            return held, (union, bits), False
        held = ({p: set(r) for p, r in union.items()}, bits)
    return held, ({}, 0), w > MAX_LOOKBACK


def _planes(blocks_fp: Sequence[BlockFootprint]) -> dict[str, Plane]:
    pieces: dict[str, list[Piece]] = {}
    for fp in blocks_fp:
        for side in (fp.reads, fp.writes):
            for pointer, found in side.items():
                pieces.setdefault(pointer, []).extend(found)
    return {p: plane_for(found) for p, found in pieces.items()}


def _rects(plane: Plane, pieces: Iterable[Piece]) -> list[Rect]:
    return [r for piece in pieces for r in plane.rectangles(piece)]
