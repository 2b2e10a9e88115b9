"""Races on global memory between blocks that run together (`interpreter.run_together`,
and a program with `tile_post`/`tile_wait`): a read or write of an element another
block wrote, with nothing ordering that write before it, is a `VMError` at the
access's line that names the other block and the line of its write.

    races = GlobalRaces(blocks)              # one per synchronized run
    races.start(b)                           # block b begins
    races.read(b, buffer, bit_addresses, site) / races.write(...)
    races.release(b, key) / races.acquire(b, key)

Order comes from vector clocks (happens-before): block `b` holds a clock, one counter a
block; `b`'s own counter stamps its writes and grows at each release. A `tile_post`
releases (the semaphore element's clock takes the join with the poster's), a
`tile_wait` acquires when it returns (the waiter's clock takes the join with the
element's), an `atomic_add` does both on its element, as on the GPU. A write by `w`
stamped `t` is ordered before an access by `b` when `b`'s clock has seen `w` at `t`
or later. Elements are tracked at their first byte. Writes and reads of the same block
never race here (a block's own order is the program's); reads after reads never race.
The semaphores' and atomic counters' own elements are synchronization, not checked.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tilevm.ir.errors import VMError

__all__ = ["GlobalRaces"]


class GlobalRaces:
    """The happens-before state of one synchronized run (module docstring)."""

    def __init__(self, blocks: int) -> None:
        self.blocks = blocks
        self.clocks: dict[int, np.ndarray] = {}
        self.shadows: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.sync: dict[tuple[int, int], np.ndarray] = {}
        self.sites: list[str] = []

    def start(self, block: int) -> None:
        clock = np.zeros(self.blocks, dtype=np.int64)
        clock[block] = 1
        self.clocks[block] = clock

    def site(self, text: str) -> int:
        self.sites.append(text)
        return len(self.sites) - 1

    # ---- accesses -----------------------------------------------------------------------
    def read(self, block: int, buffer: Any, bits: np.ndarray, site: int) -> None:
        self._check(block, buffer, bits, "reads")

    def write(self, block: int, buffer: Any, bits: np.ndarray, site: int) -> None:
        index = self._check(block, buffer, bits, "writes")
        writer, stamp, where = self._shadow(buffer)
        writer[index] = block
        stamp[index] = self.clocks[block][block]
        where[index] = site

    def _check(self, block: int, buffer: Any, bits: np.ndarray, verb: str) -> np.ndarray:
        index = np.asarray(bits, dtype=np.int64) // 8
        writer, stamp, where = self._shadow(buffer)
        others = writer[index]
        clock = self.clocks[block]
        unordered = (others >= 0) & (others != block) & \
            (stamp[index] > clock[np.maximum(others, 0)])
        if unordered.any():
            k = int(np.argmax(unordered))
            raise VMError(
                f"race on global memory: block {block} {verb} byte {int(index[k])} of "
                f"{buffer.param.name}, which block {int(others[k])} wrote at "
                f"{self.sites[int(where[index[k]])]} with nothing ordering that write before "
                f"this access (a tile_wait for the writer's tile_post, or an atomic_add)")
        return index

    def _shadow(self, buffer: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per byte of the buffer's memory: the last writing block (-1: none), its stamp
        and the write's site; shared by every binding of the same memory."""
        key = buffer.mem.__array_interface__["data"][0]
        shadow = self.shadows.get(key)
        if shadow is None:
            size = buffer.mem.nbytes
            shadow = self.shadows[key] = (np.full(size, -1, dtype=np.int32),
                                          np.zeros(size, dtype=np.int64),
                                          np.zeros(size, dtype=np.int32))
        return shadow

    # ---- synchronization ----------------------------------------------------------------
    def element(self, buffer: Any, bits: np.ndarray) -> tuple[int, int]:
        """The key of a synchronization element (a semaphore, an atomic counter)."""
        return buffer.mem.__array_interface__["data"][0], int(bits[0]) // 8

    def release(self, block: int, key: tuple[int, int]) -> None:
        clock = self.clocks[block]
        held = self.sync.get(key)
        self.sync[key] = clock.copy() if held is None else np.maximum(held, clock)
        clock[block] += 1

    def acquire(self, block: int, key: tuple[int, int]) -> None:
        held = self.sync.get(key)
        if held is not None:
            np.maximum(self.clocks[block], held, out=self.clocks[block])
