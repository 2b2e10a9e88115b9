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
SAMPLE_ABOVE = 4096  # blocks: a larger launch is estimated from SAMPLED_WAVES waves
SAMPLED_WAVES = 12


@dataclass(frozen=True)
class DramEstimate:
    """Per pointer, in bits: `read` (fetched from DRAM), `written` (reaching it),
    `footprint` (distinct bits touched); `approximate`: a block's footprint was, the
    lookback was cut at `MAX_LOOKBACK` waves, or the waves were sampled."""

    read: Mapping[str, int]
    written: Mapping[str, int]
    footprint: Mapping[str, int]
    approximate: bool


def dram_estimate(footprints: Sequence[BlockFootprint] | Callable[[int], BlockFootprint],
                  blocks: int, blocks_per_wave: int, l2_bytes: int) -> DramEstimate:
    """The estimate of the module docstring for `blocks` blocks whose footprints, in
    launch order, `footprints` gives (a sequence, or a function of the block's linear
    index).

    A launch of more than `SAMPLE_ABOVE` blocks is estimated from `SAMPLED_WAVES` waves
    spread over it, the last two included (with the earlier waves each looks back on):
    the bytes each fetches, writes and first touches are interpolated linearly between
    them (marked approximate). Walking the footprints of 30,000 blocks takes the Python
    walk tens of seconds, and the waves of a tiled kernel differ little."""
    if blocks_per_wave < 1:
        raise ValueError(f"blocks_per_wave must be at least 1, got {blocks_per_wave}")
    get = footprints if callable(footprints) else footprints.__getitem__
    count = -(-blocks // blocks_per_wave)
    sampled = blocks > SAMPLE_ABOVE and count > SAMPLED_WAVES
    picks = sorted({round(i * (count - 2) / (SAMPLED_WAVES - 2))
                    for i in range(SAMPLED_WAVES - 1)} | {count - 1}) if sampled \
        else list(range(count))
    waves = _Waves(get, blocks, blocks_per_wave, picks)
    capacity = 8 * l2_bytes
    cut = False
    if sampled:
        per_wave = [_wave_bits(waves, w, capacity, totals=True) for w in picks]
        cut = any(c for *_, c in per_wave)
        fetched, written, footprint = (_interpolated(picks, [q[i] for q in per_wave])
                                       for i in range(3))
    else:  # the unions over every wave, exactly; fetched only if L2 cannot hold them
        pointers = sorted(waves.planes)
        footprint = {p: union_area(r for w in picks for r in waves.rects(w)[2].get(p, ()))
                     for p in pointers}
        written = {p: union_area(r for w in picks for r in waves.rects(w)[1].get(p, ()))
                   for p in pointers}
        if sum(footprint.values()) > capacity:
            per_wave = [_wave_bits(waves, w, capacity, totals=False) for w in picks]
            cut = any(c for *_, c in per_wave)
            fetched = _sum(q[0] for q in per_wave)
    if sum(footprint.values()) <= capacity:  # all of it stays: each byte read once
        fetched = {p: footprint[p] - written.get(p, 0) for p in footprint}
    approximate = waves.approximate or sampled or cut
    return DramEstimate({p: round(b) for p, b in fetched.items()},
                        {p: round(b) for p, b in written.items()},
                        {p: round(b) for p, b in footprint.items()}, approximate)


WaveRects = tuple[dict[str, set[Rect]], dict[str, set[Rect]], dict[str, set[Rect]]]


class _Waves:
    """The launch's waves as rectangles per pointer (read, written, touched), each made
    when first asked for; the planes come from the footprints of the waves `picks`."""

    def __init__(self, get: Callable[[int], BlockFootprint], blocks: int, per_wave: int,
                 picks: list[int]) -> None:
        self.get, self.blocks, self.per_wave = get, blocks, per_wave
        self._footprints: dict[int, list[BlockFootprint]] = {}
        self._rects: dict[int, WaveRects] = {}
        self.planes = _planes([fp for w in picks for fp in self.footprints(w)])
        self.approximate = False

    def footprints(self, w: int) -> list[BlockFootprint]:
        if w not in self._footprints:
            first = w * self.per_wave
            self._footprints[w] = [self.get(i) for i in
                                   range(first, min(first + self.per_wave, self.blocks))]
        return self._footprints[w]

    def rects(self, w: int) -> WaveRects:
        if w not in self._rects:
            wave: WaveRects = ({}, {}, {})
            for fp in self.footprints(w):
                self.approximate |= fp.approximate
                for side, into in ((fp.reads, wave[0]), (fp.writes, wave[1])):
                    for pointer, pieces in side.items():
                        plane = self.planes.get(pointer) or self._plane(pointer, pieces)
                        rects = _rects(plane, pieces)
                        into.setdefault(pointer, set()).update(rects)
                        wave[2].setdefault(pointer, set()).update(rects)
            self._rects[w] = wave
        return self._rects[w]

    def _plane(self, pointer: str, pieces: Iterable[Piece]) -> Plane:
        """The plane of a pointer the planned waves did not touch."""
        self.planes[pointer] = plane_for(pieces)
        return self.planes[pointer]


def _wave_bits(waves: _Waves, w: int, capacity: float, totals: bool
               ) -> tuple[dict[str, float], dict[str, int], dict[str, int], bool]:
    """Wave `w`'s bits by pointer: fetched (the rule of the module docstring), and with
    `totals` written and touched for the first time since the waves it looks back on
    (else empty: the exact estimate takes the unions over every wave); and whether its
    lookback was cut at `MAX_LOOKBACK`."""
    reads, writes, touched = waves.rects(w)
    # missed[p]: the bits of p's reads that no wave since w - j touched (nor this wave
    # wrote); those first found in wave w - j are kept at 1 - d_j / capacity
    missed = {p: _missed(rects, writes.get(p, set())) for p, rects in reads.items()}
    fetched: dict[str, float] = dict(missed)
    since: dict[str, set[Rect]] = {}  # what waves w - j, ..., w - 1 touched
    cut = False
    for j in range(1, w + 1):
        if j > MAX_LOOKBACK:
            cut = True
            break
        for p, rects in waves.rects(w - j)[2].items():
            since.setdefault(p, set()).update(rects)
        distance = sum(union_area(r) for r in since.values())
        if distance >= capacity:
            break
        kept = 1 - distance / capacity
        for p, rects in reads.items():
            still = _missed(rects, since.get(p, set()) | writes.get(p, set()))
            fetched[p] -= kept * (missed[p] - still)
            missed[p] = still
    if not totals:
        return fetched, {}, {}, cut
    new = {p: _missed(rects, since.get(p, set())) for p, rects in touched.items()}
    return fetched, {p: union_area(r) for p, r in writes.items()}, new, cut


def _sum(values: Iterable[Mapping[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for by_pointer in values:
        for p, v in by_pointer.items():
            total[p] = total.get(p, 0) + v
    return total


def _interpolated(picks: list[int], values: list[Mapping[str, float]]) -> dict[str, float]:
    """The sum over every wave up to the last pick of per-wave values known at `picks`
    (increasing, from 0), linear in between."""
    total = _sum(values[-1:])
    for (a, va), (b, vb) in zip(zip(picks, values), zip(picks[1:], values[1:])):
        for p in set(va) | set(vb):
            x, y = va.get(p, 0), vb.get(p, 0)
            total[p] = total.get(p, 0) + (b - a) * x + (y - x) * (b - a - 1) / 2
    return total


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
