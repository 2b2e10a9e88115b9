"""Clusters of blocks in the interpreter: `cluster_sync` and the reads of a peer block's
shared memory (`load_shared(..., peer=)`).

A program with either runs its blocks under the block scheduler (`interp_blocks`), as
programs that `tile_wait` do. Each block counts the cluster barriers it has reached (its
*phase*); at a `cluster_sync` it pauses until every block of its cluster has reached that
barrier. A block that ends while a block of its cluster waits at a barrier it never
reached leaves that block waiting forever: a deadlock, a `VMError` at the wait's line.

A peer's read sees the peer's shared memory as it is when the reader runs. Between two
barriers the blocks of a cluster run in no order the program may rely on, so two rules
make a result independent of the order the interpreter picks, each a race reported at
the line that breaks it:
- a block reads an element of a peer's tensor that the peer wrote since the last cluster
  barrier (the write is not ordered before the read);
- a block writes an element of its tensor that a peer read since the last cluster
  barrier (the read is not ordered before the write).
A block that reads its own rank is an ordinary read of its own shared memory. A peer
may read a tensor after its owner freed it: such a tensor keeps its bytes to the end of
the program (`backend.analysis.shared_memory`), and only its owner's own uses end at
`free_shared`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.printer import format_instruction
from tilevm.ir.transform import instructions
from tilevm.vm.interp_exec_memory import MemorySemantics
from tilevm.vm.interp_memory import SharedAlloc

__all__ = ["ClusterSemantics", "uses_clusters", "join_clusters"]


def uses_clusters(program: Any) -> bool:
    """Whether the program's blocks meet at cluster barriers or read each other's shared
    memory (so that they must run under the block scheduler)."""
    return any(isinstance(i, ins.ClusterSync)
               or (isinstance(i, ins.LoadShared) and i.peer is not None)
               for i in instructions(program.body))


def join_clusters(states: Sequence[Any], blocks: Sequence[tuple[int, tuple[int, int, int]]]
                  ) -> None:
    """Give each block's state (of launch k, block (x, y, z)) the list of its cluster's
    states by rank (`x % n`) and its rank, for the launches whose programs use
    clusters."""
    clusters: dict[tuple[int, int, int, int], list[Any]] = {}
    clustered: dict[int, bool] = {}  # per launch, looked at once (not once a block)
    for state, (k, (x, y, z)) in zip(states, blocks):
        n = state.program.cluster
        if k not in clustered:
            clustered[k] = n > 1 and uses_clusters(state.program)
        if clustered[k]:
            members = clusters.setdefault((k, x // n, y, z), [None] * n)
            members[x % n] = state
            state.cluster, state.cluster_rank = members, x % n


class ClusterSemantics(MemorySemantics):
    """`exec_cluster_sync` and the peer side of `load_shared` (module docstring)."""

    cluster: list[Any] | None = None  # the states of this block's cluster, by rank
    cluster_rank = 0
    cluster_phase = 0  # the cluster barriers this block has reached

    def exec_cluster_sync(self, inst: ins.ClusterSync) -> None:
        """Every block of the cluster meets here; for the block itself it is a `sync`."""
        self.epoch += 1
        if self.cluster is None:  # (a lone block: no other block to wait for)
            return
        self.cluster_phase += 1
        phase, members, block, location = self.cluster_phase, self.cluster, self.block, \
            inst.loc

        def reached() -> bool:
            return all(m.cluster_phase >= phase for m in members)

        def deadlock() -> VMError:
            behind = [m.block for m in members if m.cluster_phase < phase]
            return VMError(f"deadlock: block {block} waits at cluster barrier {phase} for "
                           f"every block of its cluster, and block(s) {behind} end or wait "
                           f"elsewhere without reaching it", format_instruction(inst),
                           location)

        self.scheduler.pause(self.task, ready_when=reached, site=deadlock)

    def exec_load_shared(self, inst: ins.LoadShared) -> None:
        """`out[i] = src[offsets + i]`, `src` a peer's with `peer` (module docstring)."""
        if inst.peer is None or self.cluster is None:
            super().exec_load_shared(inst)
            return
        rank = self._eval_int(inst.peer, "peer")
        n = len(self.cluster)
        if not 0 <= rank < n:
            self._fail(f"peer {rank} is not a block of the cluster: ranks are 0 .. {n - 1}")
        if rank == self.cluster_rank:
            super().exec_load_shared(inst)
            return
        peer = self.cluster[rank]
        alloc = getattr(peer, "values", {}).get(inst.src.name)
        if not isinstance(alloc, SharedAlloc):
            self._fail(f"cluster race on {inst.src}: block {self.block} reads it before "
                       f"block rank {rank} of its cluster has allocated it (no cluster_sync "
                       f"orders the peer's writes before the read)")
        self._load_shared(inst, alloc, peer=True)

    def _peer_read(self, alloc: SharedAlloc, bitpos: np.ndarray, offsets: np.ndarray,
                   tile: tuple[int, ...]) -> None:
        """Check a read of a peer's elements at `bitpos` (the first rule); record it."""
        _phases(alloc)
        units = alloc.units(bitpos)
        flat = units.reshape(-1)
        fresh = alloc.w_phase[flat] == self.cluster_phase
        if fresh.any():
            i = int(np.argmax(fresh))
            site = int(alloc.w_site[flat[i]])
            element = self._element_name(alloc, i // units.shape[-1], offsets, tile)
            self._fail(f"cluster race on {element}: the peer block wrote it at "
                       f"{self._where(site) if site >= 0 else 'an earlier line'} and block "
                       f"{self.block} reads it without a cluster_sync between")
        alloc.peer_r_phase[flat] = self.cluster_phase
        alloc.peer_r_site[flat] = self._site(self._inst)  # type: ignore[arg-type]

    def _wrote_shared(self, alloc: SharedAlloc, units: np.ndarray) -> None:
        """Check a write of the block's own `units` (the second rule); record it."""
        if self.cluster is None:
            return
        _phases(alloc)
        read = alloc.peer_r_phase[units] == self.cluster_phase
        if read.any():
            site = int(alloc.peer_r_site[units[int(np.argmax(read))]])
            self._fail(f"cluster race on {alloc.tensor}: a peer block read it at "
                       f"{self._where(site)} and block {self.block} writes it without a "
                       f"cluster_sync between")
        alloc.w_phase[units] = self.cluster_phase


def _phases(alloc: SharedAlloc) -> None:
    """The cluster phase of each unit's last write and last read by a peer (made on the
    first access in a program that uses clusters)."""
    if alloc.w_phase is None:
        n = alloc.init.size
        alloc.w_phase = np.full(n, -1, dtype=np.int64)
        alloc.peer_r_phase = np.full(n, -1, dtype=np.int64)
        alloc.peer_r_site = np.full(n, -1, dtype=np.int64)
