"""Bytes moved between memory levels and FLOPs by unit, for one launch of a program.

    from tilevm.cost.traffic import analyze_traffic
    t = analyze_traffic(program, {"M": 1, "N": 12288, "K": 4096})
    t.total["global->register"], t.dram, t.flops["tensor_core"]

The rules (docs/cost-model.md tells them with the worked examples):

- Transfers, by instruction: `load_global` "global->register", `copy_async`
  "global->shared", `store_global` "register->global", `load_shared`
  "shared->register", `store_shared` "register->shared", a `dot` operand in shared
  memory (the tensor cores read it in place) "shared->register", `atomic_add` one
  element "register->global" (the read-modify-write happens in L2 and counts once; the
  old value it returns is not counted again). Bytes are elements times the element's
  bits / 8, so packed sub-byte data counts its packed bits (kernels read packed codes as
  bytes and `view` them, and a `view` moves nothing).
- Ragged edges: a tile that sticks out of its global tensor moves only its elements
  inside the bounds (a masked element is predicated off: no memory transaction). Those
  moved bytes are the totals (`total`); `issued` counts the whole tiles the
  instructions cover. A `copy_async(multicast=True)` is read once for the cluster: each
  block counts its share, 1 / cluster of the tile.
- Loops count their body once per iteration (bounds evaluated over the scalar
  arguments, the block index, enclosing loop variables and `let`s), so a tile loaded in
  a K loop counts per k-tile. A loop of more than `EXACT_EXTENT` iterations is
  sampled: its first two and last two iterations, and the middle of each of `SEGMENTS`
  equal runs between them standing for its run (`walk.sample`); a loop that updates a
  scalar variable (`AssignVar`) is walked iteration by iteration. Each grid axis the
  program reads (`block_idx`) is sampled the same way; an axis it never reads is walked
  once and weighted by its extent. Sampling is exact
  wherever a sampled run is uniform (divisible sizes, edges at the ends of a run); when
  the samples of one run differ (a causal diagonal), the result is marked approximate.
- `atomic_add`'s old value: the blocks that add to the same element (they differ only
  along the grid axes its offsets do not read) are taken to arrive in the order of
  their index along those axes, the element starting at zero: exactly one of n sees
  each of 0, v, ..., (n - 1) v, as in any real order, so split-K's "last block" branch
  counts once a tile.
- `if`: the branch its condition selects; a condition on a value the walk cannot know
  counts the larger branch for every block, and the result is marked approximate.
- FLOPs: `cost.flops` (tensor cores by `dot` shape, FMA pipes, conversions).
- DRAM ("dram"): `cost.dram` (module docstring): each block's footprint (the bytes of
  each tensor it reads and writes, exact, `cost.footprint`), blocks in waves of
  `blocks_per_wave` in launch order, a wave fetching the union of its reads except what
  L2 (`l2_bytes`) kept of the most recent waves, each written byte once. With
  `l2_bytes=0` (no L2) every moved read comes from DRAM. The counting walks sample the
  grid axes; the footprints come from every block (`cost.footprint`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import product
from math import prod

from tilevm.cost.dram import DramEstimate, dram_estimate
from tilevm.cost.flops import FLOP_COUNTS, UNITS
from tilevm.cost.footprint import Footprints
from tilevm.cost.statements import program_axes
from tilevm.cost.walk import (
    EXACT_EXTENT,
    LEVELS,
    SEGMENTS,
    Context,
    Counts,
    Walker,
    bind_scalars,
    bits_to_bytes,
    sample,
)
from tilevm.ir.stmt import Program

__all__ = ["LEVELS", "UNITS", "EXACT_EXTENT", "SEGMENTS", "TensorTraffic", "Traffic",
           "analyze_traffic"]


@dataclass(frozen=True)
class TensorTraffic:
    """One global tensor (the memory of a pointer argument) over the whole launch, in
    bytes: `read` and `written` moved (inside the bounds), `issued_read` and
    `issued_written` the whole tiles, `footprint` the distinct bytes the launch's tiles
    of it cover, `dram` the model's DRAM bytes (reads and writes) after L2 reuse."""

    read: int
    written: int
    issued_read: int
    issued_written: int
    footprint: int
    dram: int


@dataclass(frozen=True)
class Traffic:
    """What one launch moves and computes (module docstring for the rules). Bytes and
    FLOPs are integers.

    `total`: bytes moved between each pair of levels (`LEVELS`) over the launch, and
    "dram" (the same as `dram`); `issued`: the same for the whole tiles the instructions
    cover (ragged edges included); `per_block`: `total` over the grid's blocks (floor),
    `block_max`: the most any one block moves; `flops` and `flops_per_block` by unit
    (`UNITS`), and of "tensor_core" the part warp-level `mma.sync` does ("mma_sync",
    `cost.flops`); `tensors`: by pointer argument; `working_set`: the tensors' footprints
    together; `approximate`: a sampled range was not uniform, a condition or an offset
    could not be evaluated, or the DRAM estimate's lookback was cut short."""

    grid: tuple[int, int, int]
    total: Mapping[str, int]
    issued: Mapping[str, int]
    per_block: Mapping[str, int]
    block_max: Mapping[str, int]
    flops: Mapping[str, int]
    flops_per_block: Mapping[str, int]
    tensors: Mapping[str, TensorTraffic]
    dram: int
    working_set: int
    approximate: bool


def analyze_traffic(program: Program, scalars: Mapping[str, int | float], *,
                    l2_bytes: int = 0, blocks_per_wave: int | None = None) -> Traffic:
    """The bytes and FLOPs of one launch of the specialized `program` with the scalar
    arguments `scalars` (by parameter name); `l2_bytes`: the L2 capacity the DRAM
    estimate assumes (0: no L2, every read from DRAM); `blocks_per_wave`: the blocks
    that run at once (the SMs times the blocks an SM holds; None: the whole grid)."""
    if not isinstance(program, Program):
        raise TypeError(f"analyze_traffic takes a specialized Program, got "
                        f"{type(program).__name__} (call the kernel's .specialize(...))")
    if blocks_per_wave is not None and blocks_per_wave < 1:
        raise ValueError(f"blocks_per_wave must be at least 1, got {blocks_per_wave}")
    if l2_bytes < 0:
        raise ValueError(f"l2_bytes must not be negative, got {l2_bytes}")
    context = Context(program, bind_scalars(program, scalars))
    grid = context.grid
    axes = program_axes(program)
    samples = [sample(n) if axis in axes else [(0, n, False)] if n else []
               for axis, n in enumerate(grid)]
    total = Counts()
    block_max = dict.fromkeys(LEVELS, 0)
    runs: dict[tuple[int, tuple[int, ...]], set[tuple[int, ...]]] = {}
    for picks in product(*samples):
        block = tuple(index for index, _, _ in picks)
        weight = prod(w for _, w, _ in picks)
        counts = Counts()
        Walker(context, block).walk(program.body, counts)  # type: ignore[arg-type]
        total.add(counts, weight)
        for level, bits in counts.moved.items():
            block_max[level] = max(block_max[level], bits_to_bytes(bits))
        for axis, (_, _, interior) in enumerate(picks):
            if interior:
                others = block[:axis] + block[axis + 1:]
                runs.setdefault((axis, others), set()).add(counts.signature())
    approximate = total.approximate or any(len(s) > 1 for s in runs.values())
    blocks = prod(grid)
    footprints = Footprints(context)
    gx, gy = grid[0], grid[1]
    dram = dram_estimate(lambda i: footprints.of_block((i % gx, i // gx % gy, i // (gx * gy))),
                         blocks, blocks_per_wave or max(blocks, 1), l2_bytes)
    return _result(grid, total, block_max, dram, approximate, l2_bytes)


def _result(grid: tuple[int, int, int], total: Counts, block_max: dict[str, int],
            estimate: DramEstimate, approximate: bool, l2_bytes: int) -> Traffic:
    blocks = prod(grid)
    pointers = sorted({p for p, _ in total.tensor_moved} | {p for p, _ in total.tensor_issued})
    tensors = {}
    for p in pointers:
        read = bits_to_bytes(total.tensor_moved.get((p, "read"), 0))
        written = bits_to_bytes(total.tensor_moved.get((p, "write"), 0))
        fetched = bits_to_bytes(estimate.read.get(p, 0)) if l2_bytes else read
        tensors[p] = TensorTraffic(read, written,
                                   bits_to_bytes(total.tensor_issued.get((p, "read"), 0)),
                                   bits_to_bytes(total.tensor_issued.get((p, "write"), 0)),
                                   bits_to_bytes(estimate.footprint.get(p, 0)),
                                   fetched + bits_to_bytes(estimate.written.get(p, 0)))
    dram = sum(t.dram for t in tensors.values())
    levels = {level: bits_to_bytes(total.moved[level]) for level in LEVELS}
    return Traffic(
        grid=grid, total={**levels, "dram": dram},
        issued={level: bits_to_bytes(total.issued[level]) for level in LEVELS},
        per_block={level: levels[level] // blocks if blocks else 0 for level in LEVELS},
        block_max=block_max,
        flops=dict(total.flops),
        flops_per_block={u: total.flops[u] // blocks if blocks else 0 for u in FLOP_COUNTS},
        tensors=tensors, dram=dram,
        working_set=sum(t.footprint for t in tensors.values()),
        approximate=approximate or estimate.approximate)
