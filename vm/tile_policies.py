"""Tile-synchronization policies (cuSync's): which producer tiles a consumer tile waits
for, as values a kernel uses and a host checks (docs/tile-sync.md).

    policy = RowSync(columns=8)                   # a consumer row waits for 8 tiles
    policy.post(sem, tile)                        # in the producer, after its tile
    policy.wait(sem, row, generation)             # in the consumer, before it reads
    policy.semaphores(producer_tiles=64)          # the int32 semaphores to allocate
    check_policy(policy, producer_tiles=64, consumer_tiles=16)  # every wait satisfiable

Tiles are numbered in one order shared by both kernels: rows first (`tile_of`: block
`b` is tile `(b // columns, b % columns)`), so the producer finishes whole rows early and
the consumers of those rows can start.

- `TileSync()`: consumer tile `t` waits for producer tile `t` (one semaphore a tile).
- `RowSync(columns)`: producer tile `t` posts to its row's semaphore (`t // columns`);
  consumer row `r` waits until all `columns` tiles of row `r` have posted.
- `StridedSync(stride, count)`: consumer tile `t` waits for producer tiles
  `t, t + stride, ..., t + (count - 1) * stride`.
- `AffineSync(scale, offset, stride, count)`: consumer tile `t` waits for producer tiles
  `scale * t + offset + i * stride`, `i < count`: any map of that form (the others are
  `AffineSync(1, 0, 1, 1)` and `AffineSync(1, 0, stride, count)`).

A wait expects `generation * posts` (the posts its semaphore receives per call), with
`generation` a kernel argument that counts calls from 1: a semaphore only grows, so no
reset is needed between calls. The methods work on Python ints (the host's checks) and
on the kernel's scalars alike.

`take_ticket` is the alternative to two kernels: one persistent grid over the tiles of
both in topological order, each block taking the next ticket.

`check_policy` proves every wait of every consumer tile satisfiable by the producer's
posts (a wait on a semaphore no tile posts enough to is a deadlock, rejected before
anything runs). `check_sync_graph` rejects kernels that wait on each other in a cycle:
a producer that waits on its consumer, directly or through others.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tilevm.ir.errors import VMError
from tilevm.vm.lang_memory import atomic_add, tile_post, tile_wait

__all__ = ["TilePolicy", "TileSync", "RowSync", "StridedSync", "AffineSync", "tile_of",
           "take_ticket", "check_policy", "check_sync_graph", "TilePolicyError"]


class TilePolicyError(VMError):
    """A policy, or a graph of synchronized kernels, that would deadlock."""


def tile_of(block: Any, columns: int) -> tuple[Any, Any]:
    """The tile `(row, column)` of linear block `block` in the shared order (rows
    first)."""
    return block // columns, block % columns


class TilePolicy(ABC):
    """What every policy answers (module docstring)."""

    @abstractmethod
    def post_index(self, producer_tile: Any) -> Any:
        """The semaphore producer tile `producer_tile` posts to."""

    @abstractmethod
    def waited(self, consumer_tile: Any) -> list[Any]:
        """The semaphores consumer tile `consumer_tile` waits for."""

    def posts(self) -> int:
        """How many posts each waited semaphore receives per call."""
        return 1

    def semaphores(self, producer_tiles: int) -> int:
        """How many semaphores the producer's tiles post to."""
        return producer_tiles

    # ---- in kernels ------------------------------------------------------------------
    def post(self, sem: Any, producer_tile: Any) -> None:
        tile_post(sem, [self.post_index(producer_tile)], 1)

    def wait(self, sem: Any, consumer_tile: Any, generation: Any) -> None:
        for index in self.waited(consumer_tile):
            tile_wait(sem, [index], generation * self.posts())


@dataclass(frozen=True)
class AffineSync(TilePolicy):
    """Consumer tile `t` waits for producer tiles `scale * t + offset + i * stride`."""

    scale: int = 1
    offset: int = 0
    stride: int = 1
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1:
            raise TilePolicyError(f"{self}: a consumer tile waits for at least one "
                                  f"producer tile (count >= 1)")

    def post_index(self, producer_tile: Any) -> Any:
        return producer_tile

    def waited(self, consumer_tile: Any) -> list[Any]:
        first = consumer_tile * self.scale + self.offset
        return [first + i * self.stride for i in range(self.count)]


def TileSync() -> AffineSync:  # noqa: N802 (a policy's name, as cuSync names it)
    """Consumer tile `t` waits for producer tile `t`."""
    return AffineSync()


def StridedSync(stride: int, count: int) -> AffineSync:  # noqa: N802
    """Consumer tile `t` waits for producer tiles `t + i * stride`, `i < count`."""
    return AffineSync(1, 0, stride, count)


@dataclass(frozen=True)
class RowSync(TilePolicy):
    """Producer tiles post to their row's semaphore; consumer row `r` waits for all
    `columns` tiles of row `r`."""

    columns: int

    def __post_init__(self) -> None:
        if self.columns < 1:
            raise TilePolicyError(f"{self}: a row has at least one tile")

    def post_index(self, producer_tile: Any) -> Any:
        return producer_tile // self.columns

    def waited(self, consumer_tile: Any) -> list[Any]:
        return [consumer_tile]

    def posts(self) -> int:
        return self.columns

    def semaphores(self, producer_tiles: int) -> int:
        return -(-producer_tiles // self.columns)


def take_ticket(counter: Any, generation: Any, tickets: Any) -> Any:
    """This block's ticket, 0..tickets-1, in call `generation` (counting from 1) of a
    persistent kernel that does a producer's and a consumer's tiles in one grid: the
    first tickets the producer's tiles, the rest the consumer's, in topological order.
    Blocks take tickets in the order they start, so a block waits only for tiles of
    smaller tickets, which blocks already running hold: no deadlock, whatever order the
    GPU starts blocks in (without programmatic dependent launch, or before sm_90). The
    int32 `counter` (a one-element global tensor) needs no reset: call `g` takes its
    values `(g - 1) * tickets` to `g * tickets - 1`."""
    return atomic_add(counter, [0], 1) - (generation - 1) * tickets


def check_policy(policy: TilePolicy, producer_tiles: int, consumer_tiles: int) -> None:
    """Every consumer tile's waits are satisfiable by the producer tiles' posts (module
    docstring); a `TilePolicyError` names the first that is not."""
    posted = Counter(policy.post_index(t) for t in range(producer_tiles))
    for t in range(consumer_tiles):
        for index in policy.waited(t):
            if posted[index] < policy.posts():
                raise TilePolicyError(
                    f"{policy}: consumer tile {t} waits for semaphore {index}, which "
                    f"the {producer_tiles} producer tiles post to {posted[index]} times of "
                    f"the {policy.posts()} it waits for: it would wait forever")


def check_sync_graph(waits: Mapping[str, Sequence[str]]) -> None:
    """`waits[k]`: the kernels whose tiles kernel `k` waits for. A cycle (a producer
    waiting on its consumer, directly or through others) is a `TilePolicyError` naming
    it: the kernels on it would wait for each other forever."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(kernel: str) -> None:
        state[kernel] = 1
        path.append(kernel)
        for upstream in waits.get(kernel, ()):
            if state.get(upstream) == 1:
                cycle = path[path.index(upstream):] + [upstream]
                raise TilePolicyError("kernels that wait on each other in a cycle: "
                                      + " -> ".join(cycle) + " (each waits for the next)")
            if upstream not in state:
                visit(upstream)
        path.pop()
        state[kernel] = 2

    for kernel in waits:
        if kernel not in state:
            visit(kernel)
