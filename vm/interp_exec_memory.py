"""The meaning of the memory instructions in the reference interpreter: global views,
loads, stores and atomics on global memory; shared allocations, loads, stores and
asynchronous copies; `sync`; `launch_dependents` and `wait_prerequisites` (no-ops
here); and the race and initialization checks of shared memory (`exec_<opname>`
methods; `vm.interpreter`'s docstring states the rules).
"""

from __future__ import annotations

import functools
import math
from typing import Any, NoReturn

import numpy as np

from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.printer import format_instruction
from tilevm.ir.types import MemorySpace, Tensor
from tilevm.layouts.register_layout import RegisterLayout
from tilevm.layouts.shared_layout import SharedLayout, row_major
from tilevm.vm.interp_memory import NONE, UNKNOWN, SharedAlloc, combine, read_codes, write_codes
from tilevm.vm.interp_state import AsyncCopy, GlobalView, InterpreterState
from tilevm.vm.interp_values import check_register_dtype, decode_codes, round_to, to_codes


@functools.lru_cache(maxsize=512)
def _owner_pairs(layout: RegisterLayout | None, shape: tuple[int, ...]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(thread, flat element index) for every (thread, local) slot of `layout` over a tile
    of `shape`; without a layout, every element once with the UNKNOWN thread."""
    size = math.prod(shape)
    if layout is None:
        return np.full(size, UNKNOWN, dtype=np.int64), np.arange(size, dtype=np.int64)
    table = layout.table()
    threads = np.repeat(np.arange(table.shape[0], dtype=np.int64), table.shape[1])
    if not shape:
        return threads, np.zeros(threads.size, dtype=np.int64)
    coords = tuple(table[..., d].reshape(-1) for d in range(len(shape)))
    return threads, np.ravel_multi_index(coords, shape).astype(np.int64)


@functools.lru_cache(maxsize=512)
def _owner_matrix(layout: RegisterLayout, shape: tuple[int, ...]) -> np.ndarray:
    """`[element, r]`: the `replication` threads that hold each (row-major) element."""
    threads, flat = _owner_pairs(layout, shape)
    order = np.argsort(flat, kind="stable")
    return threads[order].reshape(math.prod(shape), -1)


class MemorySemantics(InterpreterState):
    """`exec_<opname>` for the global and shared memory instructions."""

    # ---- global memory ------------------------------------------------------------------
    def _global_elements(self, view: GlobalView, offsets: np.ndarray,
                         tile: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(mask of tile elements inside the view's shape, their bit addresses) over the
        row-major flattened tile `offsets + i`."""
        ndim = len(view.shape)
        if len(tile) != ndim:
            self._fail(f"a tile of rank {len(tile)} accesses {view.tensor}, of rank {ndim}")
        n = math.prod(tile)
        idx = np.indices(tile, dtype=np.int64).reshape(ndim, n) + offsets[:, None]
        shape = np.array(view.shape, dtype=np.int64)[:, None]
        mask = np.all((idx >= 0) & (idx < shape), axis=0)
        strides = np.array(view.strides, dtype=np.int64)[:, None]
        element = view.offset + (idx * strides).sum(axis=0)
        b = view.dtype.bits
        outside = mask & ((element < 0) | ((element + 1) * b > view.buffer.bits))
        if outside.any():
            i = int(np.argmax(outside))
            coord = tuple(int(c) for c in idx[:, i])
            self._fail(f"{view.tensor}{list(coord)} is inside the view's shape {view.shape} "
                       f"but at element {int(element[i])} of argument "
                       f"{view.buffer.param.name}, outside its buffer "
                       f"({view.buffer.bits // b} elements of {view.dtype})")
        return mask, element * b

    def exec_global_view(self, inst: ins.GlobalView) -> None:
        """`out` views global memory at `ptr + offset` with `out`'s shape and `strides`."""
        out = inst.out
        if out.space is not MemorySpace.GLOBAL:
            self._fail(f"global_view must produce a global tensor, got {out.type}")
        buffer = self.buffers.get(inst.ptr)
        if buffer is None:
            self._fail(f"{inst.ptr} is not a pointer parameter of kernel {self.program.name}")
        shape = tuple(self._eval_int(s, f"extent {d}") for d, s in enumerate(out.shape))
        if any(s < 0 for s in shape):
            self._fail(f"global view {out} has a negative extent: shape {shape}")
        if len(inst.strides) != len(shape):
            self._fail(f"global view {out} has {len(shape)} dimension(s) but "
                       f"{len(inst.strides)} stride(s)")
        strides = tuple(self._eval_int(s, f"stride {d}") for d, s in enumerate(inst.strides))
        offset = self._eval_int(inst.offset, "offset")
        view = GlobalView(out, buffer, out.dtype, shape, strides, offset)
        if all(s > 0 for s in shape):  # the view's footprint must lie in the buffer
            low = offset + sum(min(0, (s - 1) * st) for s, st in zip(shape, strides))
            high = offset + sum(max(0, (s - 1) * st) for s, st in zip(shape, strides))
            b = out.dtype.bits
            have = buffer.bits // b
            if low < 0 or high >= have:
                self._fail(f"global view {out} (shape {shape}, strides {strides}, offset "
                           f"{offset}) spans elements {low}..{high} of argument "
                           f"{inst.ptr.name}, which holds {have} element(s) of {out.dtype} "
                           f"({buffer.mem.size} bytes)")
        self.values[out.name] = view

    def exec_load_global(self, inst: ins.LoadGlobal) -> None:
        """`out[i] = src[offsets + i]`; outside `src`'s shape: `other`."""
        view = self._global(inst.src)
        out = inst.out
        tile = out.type.static_shape
        check_register_dtype(out.dtype, str(out))
        offsets = self._eval_offsets(inst.offsets, len(view.shape), "load_global")
        mask, bitpos = self._global_elements(view, offsets, tile)
        if self.races is not None:
            self.races.read(self.block_id, view.buffer, bitpos[mask], self._race_site(inst))
        values = np.full(mask.size, round_to(float(inst.other), out.dtype), dtype=np.float64)
        got = decode_codes(read_codes(view.buffer.mem, bitpos[mask], view.dtype.bits), view.dtype)
        if view.dtype != out.dtype:
            got = round_to(got, out.dtype)
        values[mask] = got
        self._set(out, values.reshape(tile))

    def exec_store_global(self, inst: ins.StoreGlobal) -> None:
        """`dst[offsets + i] = src[i]` for the elements inside `dst`'s shape."""
        view = self._global(inst.dst)
        buffer = view.buffer
        if buffer.param.type.readonly:
            self._fail(f"store through the readonly pointer {buffer.param.name} "
                       f"({buffer.param.type})")
        if not buffer.array.flags.writeable:
            self._fail(f"the array passed as {buffer.param.name} is not writeable")
        src = self._reg(inst.src)
        offsets = self._eval_offsets(inst.offsets, len(view.shape), "store_global")
        mask, bitpos = self._global_elements(view, offsets, src.shape)
        if self.races is not None:
            self.races.write(self.block_id, buffer, bitpos[mask], self._race_site(inst))
        values = src.reshape(-1)[mask]
        if inst.src.dtype != view.dtype:
            values = round_to(values, view.dtype)
        write_codes(buffer.mem, bitpos[mask], to_codes(values, view.dtype), view.dtype.bits)

    def exec_atomic_add(self, inst: ins.AtomicAdd) -> None:
        """`out = dst[offsets]; dst[offsets] += value` (int32, wrapping). Blocks run one
        after another, so each block's step is atomic and sees every earlier block's."""
        buffer, bitpos, _ = self._int32_element(inst.dst, inst.offsets, inst.opname,
                                                writes=True)
        self.scalars[inst.out] = _add_int32(buffer, bitpos, self._eval_int(inst.value, "value"))
        if self.races is not None:  # acquire and release, on this element
            key = self.races.element(buffer, bitpos)
            self.races.acquire(self.block_id, key)
            self.races.release(self.block_id, key)

    def exec_globaltimer(self, inst: ins.GlobalTimer) -> None:
        """The block's count of executed instructions: a clock that is deterministic."""
        self.scalars[inst.out] = self.steps

    def _int32_element(self, tensor: Tensor, offsets: Any, op: str, *, writes: bool
                       ) -> tuple[Any, np.ndarray, list[int]]:
        """The buffer, bit address and offsets of the one int32 element of global memory
        that `atomic_add`, `tile_post` and `tile_wait` work on (inside the view; never
        written through a readonly pointer)."""
        view = self._global(tensor)
        buffer = view.buffer
        if writes and buffer.param.type.readonly:
            self._fail(f"{op} through the readonly pointer {buffer.param.name} "
                       f"({buffer.param.type})")
        at = self._eval_offsets(offsets, len(view.shape), op)
        mask, bitpos = self._global_elements(view, at, (1,) * len(view.shape))
        if not mask.all():
            self._fail(f"{op}: the element at {[int(o) for o in at]} is outside {tensor} "
                       f"(shape {list(view.shape)})")
        return buffer, bitpos, [int(o) for o in at]

    # ---- tile synchronization -------------------------------------------------------------
    def exec_tile_post(self, inst: ins.TilePost) -> None:
        """`sem[offsets] += value` (int32, wrapping), then other blocks may run."""
        buffer, bitpos, _ = self._int32_element(inst.sem, inst.offsets, inst.opname,
                                                writes=True)
        _add_int32(buffer, bitpos, self._eval_int(inst.value, "value"))
        if self.races is not None:
            self.races.release(self.block_id, self.races.element(buffer, bitpos))
        if self.scheduler is not None:
            self.scheduler.pause(self.task)

    def exec_tile_wait(self, inst: ins.TileWait) -> None:
        """Other blocks run until `(int32)(sem[offsets] - expected) >= 0`; a wait no
        block left can satisfy is a deadlock (`interp_blocks`)."""
        buffer, bitpos, offsets = self._int32_element(inst.sem, inst.offsets, inst.opname,
                                                      writes=False)
        expected = self._eval_int(inst.expected, "expected")

        def value() -> int:
            return _add_int32(buffer, bitpos, 0)

        def reached() -> bool:
            return (value() - expected) % 2**32 < 2**31

        block, location = self.block, inst.loc

        def deadlock() -> VMError:
            return VMError(f"deadlock: block {block} waits for {inst.sem}{offsets} to reach "
                           f"{expected}, it holds {value()}, and no block left can post "
                           f"to it", format_instruction(inst), location)

        if self.scheduler is None:
            if not reached():
                raise deadlock()
        else:
            self.scheduler.pause(self.task, ready_when=reached, site=deadlock)
        if self.races is not None:
            self.races.acquire(self.block_id, self.races.element(buffer, bitpos))

    def _race_site(self, inst: ins.Instruction) -> int:
        """The race checker's record of `inst`'s line (made once per instruction)."""
        site = self.race_sites.get(id(inst))
        if site is None:
            site = self.race_sites[id(inst)] = self.races.site(
                f"{inst.loc} ({inst.opname})" if inst.loc else inst.opname)
        return site

    # ---- shared memory ------------------------------------------------------------------
    def _shared_tile(self, alloc: SharedAlloc, offsets: np.ndarray, tile: tuple[int, ...],
                     op: str) -> np.ndarray:
        """Bit addresses (row-major over the tile) of `alloc[offsets + i]`; the tile must
        lie inside the tensor."""
        shape = alloc.layout.shape
        if len(tile) != len(shape):
            self._fail(f"{op}: a tile of rank {len(tile)} in {alloc.name}, of rank "
                       f"{len(shape)}")
        for d, (o, n, s) in enumerate(zip(offsets, tile, shape)):
            if o < 0 or o + n > s:
                self._fail(f"{op}: the tile [{o}, {o + n}) of dim {d} is outside "
                           f"{alloc.name} (shape {shape})")
        index = tuple(slice(int(o), int(o) + n) for o, n in zip(offsets, tile))
        return alloc.offset_bits[index].reshape(-1)

    def exec_alloc_shared(self, inst: ins.AllocShared) -> None:
        """A fresh allocation of `out`; its contents are undefined until written."""
        out = inst.out
        if out.space is not MemorySpace.SHARED:
            self._fail(f"alloc_shared must produce a shared tensor, got {out.type}")
        shape = out.type.static_shape
        layout = out.layout if out.layout is not None else row_major(shape, out.dtype)
        if not isinstance(layout, SharedLayout):
            self._fail(f"shared tensor {out} has a layout of type {type(layout).__name__}, "
                       "not a SharedLayout")
        if layout.shape != shape or layout.element_bits != out.dtype.bits:
            self._fail(f"shared tensor {out} ({out.dtype}, shape {shape}) has a layout for "
                       f"{layout.element_bits}-bit elements of shape {layout.shape}")
        self.values[out.name] = SharedAlloc(out, layout, self._site(inst))

    def exec_free_shared(self, inst: ins.FreeShared) -> None:
        """End the tensor's lifetime."""
        alloc = self._shared(inst.tensor)
        if self.check_races:
            busy = alloc.inflight[alloc.inflight != NONE]
            if busy.size:
                copy = self.copies[int(busy[0])]
                self._fail(f"free_shared of {alloc.name} while the copy_async at "
                           f"{self._loc(copy.site)} into it is still in flight")
        alloc.freed_site = self._site(inst)

    def exec_load_shared(self, inst: ins.LoadShared) -> None:
        """`out[i] = src[offsets + i]` (a peer's `src`: `interp_cluster`)."""
        self._load_shared(inst, self._shared(inst.src), peer=False)

    def _load_shared(self, inst: ins.LoadShared, alloc: SharedAlloc, peer: bool) -> None:
        out = inst.out
        tile = out.type.static_shape
        check_register_dtype(out.dtype, str(out))
        offsets = self._eval_offsets(inst.offsets, len(alloc.layout.shape), "load_shared")
        bitpos = self._shared_tile(alloc, offsets, tile, "load_shared")
        layout = self._register_layout(out)
        if self.check_uninitialized:
            self._check_initialized(alloc, bitpos, offsets, tile)
        if self.check_races and peer:
            self._peer_read(alloc, bitpos, offsets, tile)
        elif self.check_races:
            self._track(alloc, bitpos, layout, offsets, tile, write=False)
        values = decode_codes(read_codes(alloc.mem, bitpos, alloc.bits), alloc.tensor.dtype)
        if alloc.tensor.dtype != out.dtype:
            values = round_to(values, out.dtype)
        self._set(out, values.reshape(tile))

    def _read_whole_shared(self, t: Tensor) -> np.ndarray:
        """The values of a whole shared tile read by the block as one (a `dot` operand the
        tensor cores read in place): any write since the last sync is a race."""
        alloc = self._shared(t)
        tile = t.type.static_shape
        offsets = np.zeros(len(tile), dtype=np.int64)
        bitpos = self._shared_tile(alloc, offsets, tile, t.name)
        if self.check_uninitialized:
            self._check_initialized(alloc, bitpos, offsets, tile)
        if self.check_races:
            self._track(alloc, bitpos, None, offsets, tile, write=False)
        return decode_codes(read_codes(alloc.mem, bitpos, alloc.bits),
                            t.dtype).reshape(tile)

    def exec_store_shared(self, inst: ins.StoreShared) -> None:
        """`dst[offsets + i] = src[i]`."""
        alloc = self._shared(inst.dst)
        src = self._reg(inst.src)
        offsets = self._eval_offsets(inst.offsets, len(alloc.layout.shape), "store_shared")
        bitpos = self._shared_tile(alloc, offsets, src.shape, "store_shared")
        layout = self._register_layout(inst.src)
        if self.check_races:
            self._track(alloc, bitpos, layout, offsets, src.shape, write=True)
        values = src.reshape(-1)
        if inst.src.dtype != alloc.tensor.dtype:
            values = round_to(values, alloc.tensor.dtype)
        write_codes(alloc.mem, bitpos, to_codes(values, alloc.tensor.dtype), alloc.bits)
        alloc.init[alloc.units(bitpos).reshape(-1)] = True

    def exec_copy_async(self, inst: ins.CopyAsync) -> None:
        """Start copying `src[offsets + i]` (0 outside `src`'s shape) into all of `dst`."""
        alloc = self._shared(inst.dst)
        view = self._global(inst.src)
        if view.dtype != alloc.tensor.dtype:
            self._fail(f"copy_async copies bits: {view.tensor} holds {view.dtype}, "
                       f"{alloc.name} holds {alloc.tensor.dtype}")
        tile = alloc.layout.shape
        offsets = self._eval_offsets(inst.offsets, len(view.shape), "copy_async")
        mask, src_bits = self._global_elements(view, offsets, tile)
        if self.races is not None:
            self.races.read(self.block_id, view.buffer, src_bits[mask], self._race_site(inst))
        codes = np.zeros(mask.size, dtype=np.uint64)  # code 0 is the value 0 of every type
        codes[mask] = read_codes(view.buffer.mem, src_bits[mask], view.dtype.bits)
        bitpos = alloc.offset_bits.reshape(-1)
        if self.check_races:
            units = self._track(alloc, bitpos, None, np.zeros(len(tile), np.int64), tile,
                                write=True)
            record = len(self.copies)
            self.copies.append(AsyncCopy(alloc, units, self._site(inst)))
            self.uncommitted.append(record)
            alloc.inflight[units] = record
        write_codes(alloc.mem, bitpos, codes, alloc.bits)
        alloc.init[alloc.units(bitpos).reshape(-1)] = True

    def exec_copy_async_commit(self, inst: ins.CopyAsyncCommit) -> None:
        """Close the group of copies started since the last commit (possibly empty)."""
        self.groups.append(self.uncommitted)
        self.uncommitted = []

    def exec_copy_async_wait(self, inst: ins.CopyAsyncWait) -> None:
        """Retire committed groups until at most `n` are in flight."""
        if not isinstance(inst.n, int) or inst.n < 0:
            self._fail(f"copy_async_wait needs a non-negative group count, got {inst.n!r}")
        while len(self.groups) > inst.n:
            for record in self.groups.pop(0):
                copy = self.copies[record]
                alloc = copy.alloc
                units = copy.units[alloc.inflight[copy.units] == record]
                alloc.inflight[units] = NONE
                # written by "the block": visible to every thread only after a sync
                alloc.w_epoch[units] = self.epoch
                alloc.w_tmin[units] = UNKNOWN
                alloc.w_tmax[units] = UNKNOWN
                alloc.w_site[units] = copy.site
                self._wrote_shared(alloc, units)

    def exec_sync(self, inst: ins.Sync) -> None:
        """Block-wide barrier: every earlier shared-memory access happens before every
        later one."""
        self.epoch += 1

    def exec_launch_dependents(self, inst: ins.LaunchDependents) -> None:
        """Nothing: launches run one after another here, so no kernel overlaps this
        one (the verifier checked where it stands)."""

    def exec_wait_prerequisites(self, inst: ins.WaitPrerequisites) -> None:
        """Nothing: every earlier launch has finished before this one started."""

    # ---- race and initialization checks -----------------------------------------------
    def _element_name(self, alloc: SharedAlloc, flat: int, offsets: np.ndarray,
                      tile: tuple[int, ...]) -> str:
        coord = np.unravel_index(flat, tile) if tile else ()
        return f"{alloc.name}[{', '.join(str(int(c) + int(o)) for c, o in zip(coord, offsets))}]"

    def _check_initialized(self, alloc: SharedAlloc, bitpos: np.ndarray, offsets: np.ndarray,
                           tile: tuple[int, ...]) -> None:
        fresh = ~alloc.init[alloc.units(bitpos)].all(axis=-1)
        if fresh.any():
            element = self._element_name(alloc, int(np.argmax(fresh)), offsets, tile)
            self._fail(f"{self._inst.opname} reads {element}, which was never written (shared "
                       "memory is undefined until written)")

    def _who(self, thread: int, site: int) -> str:
        if thread >= 0:
            return f"thread {thread}"
        if self._sites[site].opname in ("copy_async", "dot"):
            return f"{self._sites[site].opname} (the whole block)"
        return "an unknown thread (the register tile has no layout)"

    def _track(self, alloc: SharedAlloc, bitpos: np.ndarray, layout: RegisterLayout | None,
               offsets: np.ndarray, tile: tuple[int, ...], *, write: bool) -> np.ndarray:
        """Check one access of the tile at `bitpos` by the owners under `layout` against
        the accesses since the last sync, then record it. Returns the units touched."""
        threads, elems = _owner_pairs(layout, tuple(tile))
        k = alloc.units_per_element
        units = alloc.units(bitpos[elems]).reshape(-1)
        threads = np.repeat(threads, k)
        elems = np.repeat(elems, k)
        site = self._site(self._inst)  # type: ignore[arg-type]
        here = self._where(site)

        def fail(i: int, what: str) -> NoReturn:
            element = self._element_name(alloc, int(elems[i]), offsets, tile)
            self._fail(f"shared-memory race on {element}: {what} without a sync between")

        def conflicts(epoch: np.ndarray, tmin: np.ndarray, tmax: np.ndarray) -> np.ndarray:
            e, lo, hi = epoch[units], tmin[units], tmax[units]
            single = (lo == hi) & (lo >= 0) & (threads >= 0)
            return (e == self.epoch) & ~(single & (lo == threads))

        def other(tmin: np.ndarray, tmax: np.ndarray, u: int, me: int) -> int:
            lo, hi = int(tmin[u]), int(tmax[u])
            return lo if lo != me else hi

        me_name = "copy_async (the whole block)" if self._inst.opname == "copy_async" \
            else None
        busy = alloc.inflight[units] != NONE
        if busy.any():
            i = int(np.argmax(busy))
            copy = self.copies[int(alloc.inflight[units[i]])]
            me = me_name or self._who(int(threads[i]), site)
            element = self._element_name(alloc, int(elems[i]), offsets, tile)
            self._fail(f"shared-memory race on {element}: the copy_async at "
                       f"{self._loc(copy.site)} is still in flight (no copy_async_wait has "
                       f"retired its group) when {me} {'writes' if write else 'reads'} it at "
                       f"{here}")
        raw = conflicts(alloc.w_epoch, alloc.w_tmin, alloc.w_tmax)
        if raw.any() and not write:
            # Replicas of one store write the same value: a thread that is one of the
            # element's writers reads its own value (several writing instructions by
            # different threads would already have been a write-write race).
            cand = np.nonzero(raw & (alloc.w_tmin[units] >= 0) & (threads >= 0))[0]
            if cand.size:
                raw[cand[self._among_writers(alloc, units[cand], threads[cand])]] = False
        if raw.any():
            i = int(np.argmax(raw))
            u, t = int(units[i]), int(threads[i])
            wsite = int(alloc.w_site[u])
            writer = self._who(other(alloc.w_tmin, alloc.w_tmax, u, t), wsite)
            me = me_name or self._who(t, site)
            verb = "written again" if write else "read"
            fail(i, f"written by {writer} at {self._where(wsite)} and {verb} by {me} at {here}")
        if write:
            war = conflicts(alloc.r_epoch, alloc.r_tmin, alloc.r_tmax)
            if war.any():
                i = int(np.argmax(war))
                u, t = int(units[i]), int(threads[i])
                rsite = int(alloc.r_site[u])
                reader = self._who(other(alloc.r_tmin, alloc.r_tmax, u, t), rsite)
                me = me_name or self._who(t, site)
                fail(i, f"read by {reader} at {self._where(rsite)} and written by {me} at "
                        f"{here}")
        epoch, tmin, tmax, where = (
            (alloc.w_epoch, alloc.w_tmin, alloc.w_tmax, alloc.w_site) if write else
            (alloc.r_epoch, alloc.r_tmin, alloc.r_tmax, alloc.r_site))
        touched, lo, hi = combine(units, threads, epoch.size)
        current = epoch[touched] == self.epoch
        tmin[touched] = np.where(current, np.minimum(tmin[touched], lo), lo)
        tmax[touched] = np.where(current, np.maximum(tmax[touched], hi), hi)
        epoch[touched] = self.epoch
        where[touched] = site
        if write:
            alloc.w_elem[units] = elems
            self._wrote_shared(alloc, units)
        return touched

    def _wrote_shared(self, alloc: SharedAlloc, units: np.ndarray) -> None:
        """A hook on every checked write of the block's shared memory (the cluster's
        rules, `interp_cluster`, check it): nothing here."""

    def _peer_read(self, alloc: SharedAlloc, bitpos: np.ndarray, offsets: np.ndarray,
                   tile: tuple[int, ...]) -> None:
        """A hook on every checked read of a peer's shared memory (`interp_cluster`)."""

    def _among_writers(self, alloc: SharedAlloc, units: np.ndarray, threads: np.ndarray
                       ) -> np.ndarray:
        """Whether each thread is one of the owners that wrote its unit (under the register
        layout of the store that wrote it last)."""
        ok = np.zeros(units.size, dtype=bool)
        sites = alloc.w_site[units]
        for s in np.unique(sites):
            inst = self._sites[int(s)]
            src = getattr(inst, "src", None)
            if not isinstance(src, Tensor) or not isinstance(src.layout, RegisterLayout):
                continue
            owners = _owner_matrix(src.layout, src.type.static_shape)
            sel = sites == s
            ok[sel] = (owners[alloc.w_elem[units[sel]]] == threads[sel, None]).any(axis=1)
        return ok


def _add_int32(buffer: Any, bitpos: np.ndarray, value: int) -> int:
    """`element += value` on the int32 at `bitpos` (wrapping); returns the old value
    (adding 0 reads it)."""
    code = int(read_codes(buffer.mem, bitpos, 32)[0])  # two's complement
    if value:
        added = (code + value) % 2**32
        write_codes(buffer.mem, bitpos, np.array([added], dtype=np.uint64), 32)
    return code - 2**32 if code >= 2**31 else code
