"""The memory instructions of the kernel language (`vm.lang`, `tv.*`): global views,
loads, stores and atomics on global memory; shared allocation, loads, stores,
asynchronous copies and `sync`.
"""

from __future__ import annotations

from typing import Any

from tilevm import dtypes as _dtypes
from tilevm.ir.errors import VMError
from tilevm.ir.types import MemorySpace, Pointer
from tilevm.vm import frontend_values as fv
from tilevm.vm.frontend_values import Scalar, Tile
from tilevm.vm.lang_args import (
    as_list,
    builder_for,
    check_inside,
    offsets_of,
    register_tile,
    tile_in,
)

# ---- global memory -----------------------------------------------------------------------

def global_view(ptr: Any, shape: Any, strides: Any = None, offset: Any = 0,
                dtype: Any = None) -> Tile:
    """View global memory at `ptr + offset` as a tensor of `shape` (ints or runtime
    sizes), row-major unless `strides` (elements) are given. Reads nothing."""
    b = builder_for("tv.global_view")
    if not isinstance(ptr, Pointer):
        raise VMError(f"tv.global_view needs a pointer parameter, got {fv.describe(ptr)}")
    dims = [fv.to_expr(s, f"global_view shape[{i}]") for i, s in enumerate(as_list(shape))]
    if strides is not None:
        strides = [fv.to_expr(s, f"global_view strides[{i}]")
                   for i, s in enumerate(as_list(strides))]
        if len(strides) != len(dims):
            raise VMError(f"tv.global_view: {len(strides)} strides for {len(dims)} dimensions")
    if dtype is not None:
        dtype = fv.as_dtype(dtype, "tv.global_view dtype")
    return Tile(b.global_view(ptr, dims, strides, fv.to_expr(offset, "global_view offset"),
                              dtype))


def load_global(src: Any, offsets: Any, shape: Any, layout: Any = None,
                other: Any = 0) -> Tile:
    """The register tile `src[offsets + i]` for `i` over the static `shape`; elements
    outside `src` read `other`. The tile has `src`'s dtype (convert with `tv.cast`)."""
    b = builder_for("tv.load_global")
    t = tile_in(src, "tv.load_global source", MemorySpace.GLOBAL)
    shape = fv.static_shape(shape, "tv.load_global shape")
    if len(shape) != t.ndim:
        raise VMError(f"tv.load_global: shape {list(shape)} for a {t.ndim}-d tensor")
    offs = offsets_of(offsets, t.ndim, "tv.load_global")
    layout = fv.layout_for(layout, shape, MemorySpace.REGISTER, "tv.load_global")
    if not fv.is_number(other):
        raise VMError(f"tv.load_global other must be a Python number, got {fv.describe(other)}")
    fv.literal_checked(other, t.dtype)
    return Tile(b.load_global(t.tensor, offs, shape, layout, other))


def store_global(dst: Any, value: Any, offsets: Any) -> None:
    """`dst[offsets + i] = value[i]` for the elements inside `dst`."""
    b = builder_for("tv.store_global")
    t = tile_in(dst, "tv.store_global destination", MemorySpace.GLOBAL)
    v = register_tile(value, "tv.store_global value")
    if v.ndim != t.ndim:
        raise VMError(f"tv.store_global: a {v.ndim}-d tile into a {t.ndim}-d tensor")
    b.store_global(t.tensor, v.tensor, offsets_of(offsets, t.ndim, "tv.store_global"))


def atomic_add(dst: Any, offsets: Any, value: Any = 1) -> Scalar:
    """Once for the block, atomically against every other block: `old = dst[offsets];
    dst[offsets] += value` on an int32 global tensor; returns `old` (the same in every
    thread). A block's global writes before it are visible to the blocks whose
    `atomic_add` on that element comes after it (`ir.instructions.AtomicAdd`): the last
    of `n` blocks to count in (`old == n - 1`) may read what the others wrote."""
    b = builder_for("tv.atomic_add")
    t = _int32_tensor(dst, "tv.atomic_add", "destination", "tensor")
    return Scalar(b.atomic_add(t.tensor, offsets_of(offsets, t.ndim, "tv.atomic_add"),
                               _count(value, "tv.atomic_add value")))


def globaltimer() -> Scalar:
    """The GPU's global timer in nanoseconds (an int64, the same in every thread of the
    block: one thread reads it), for a timeline of where a kernel's blocks spend their
    time; store it to global memory to read it. In the interpreter: the number of
    instructions the block has executed so far."""
    return Scalar(builder_for("tv.globaltimer").globaltimer())


def tile_post(sem: Any, offsets: Any, value: Any = 1) -> None:
    """Once the whole block got here: `sem[offsets] += value` on an int32 semaphore in
    global memory, releasing the block's earlier global writes to the blocks (of this
    kernel or one running beside it) that `tile_wait` for it (docs/tile-sync.md)."""
    b = builder_for("tv.tile_post")
    t = _int32_tensor(sem, "tv.tile_post", "semaphore", "semaphore tensor")
    b.tile_post(t.tensor, offsets_of(offsets, t.ndim, "tv.tile_post"),
                _count(value, "tv.tile_post value"))


def tile_wait(sem: Any, offsets: Any, expected: Any) -> None:
    """Block the block until the int32 semaphore `sem[offsets]` has reached `expected`
    (wrapping-aware: `(int32)(sem - expected) >= 0`); then the writes the posting blocks
    released are visible here. The interpreter reports a wait no post can satisfy as a
    deadlock at this line."""
    b = builder_for("tv.tile_wait")
    t = _int32_tensor(sem, "tv.tile_wait", "semaphore", "semaphore tensor")
    b.tile_wait(t.tensor, offsets_of(offsets, t.ndim, "tv.tile_wait"),
                _count(expected, "tv.tile_wait expected"))


def _int32_tensor(value: Any, what: str, role: str, noun: str) -> Tile:
    """The int32 global tensor of an atomic or a semaphore (`role` names the argument,
    `noun` what it must be)."""
    t = tile_in(value, f"{what} {role}", MemorySpace.GLOBAL)
    if t.dtype != _dtypes.parse("int32"):
        raise VMError(f"{what} needs an int32 {noun}, got {t.dtype}")
    return t


def _count(value: Any, what: str) -> Any:
    """An integer scalar's expression (what an atomic adds, a post adds, a wait waits
    for)."""
    if isinstance(value, Tile) or not (isinstance(value, Scalar) or fv.is_number(value)):
        raise VMError(f"{what} must be an integer scalar, got {fv.describe(value)}")
    return fv.to_expr(value, what)


# ---- shared memory -----------------------------------------------------------------------

def alloc_shared(dtype: Any, shape: Any, layout: Any = None) -> Tile:
    """A shared-memory tile (contents undefined until written)."""
    b = builder_for("tv.alloc_shared")
    shape = fv.static_shape(shape, "tv.alloc_shared shape")
    layout = fv.layout_for(layout, shape, MemorySpace.SHARED, "tv.alloc_shared")
    return Tile(b.alloc_shared(fv.as_dtype(dtype, "tv.alloc_shared dtype"), shape, layout))


def free_shared(tile: Any) -> None:
    b = builder_for("tv.free_shared")
    b.free_shared(tile_in(tile, "tv.free_shared", MemorySpace.SHARED).tensor)


def load_shared(src: Any, offsets: Any, shape: Any, layout: Any = None,
                peer: Any = None) -> Tile:
    """The register tile `src[offsets + i]` (it must lie inside `src`).

    `peer` (with `tv.cluster(n)`): read `src` in the shared memory of block `peer` of
    this block's cluster (0 .. n - 1; this block is `tv.block_idx(0) % n`), what it wrote
    before the last `tv.cluster_sync()`; it writes the tile again only after the next."""
    b = builder_for("tv.load_shared")
    if peer is not None:
        peer = _count(peer, "tv.load_shared peer")
    t = tile_in(src, "tv.load_shared source", MemorySpace.SHARED)
    shape = fv.static_shape(shape, "tv.load_shared shape")
    if len(shape) != t.ndim:
        raise VMError(f"tv.load_shared: shape {list(shape)} for a {t.ndim}-d tile")
    offs = offsets_of(offsets, t.ndim, "tv.load_shared")
    check_inside(offs, shape, t.tensor.shape, "tv.load_shared")
    layout = fv.layout_for(layout, shape, MemorySpace.REGISTER, "tv.load_shared")
    return Tile(b.load_shared(t.tensor, offs, shape, layout, peer=peer))


def store_shared(dst: Any, value: Any, offsets: Any = None) -> None:
    """`dst[offsets + i] = value[i]` (offsets default to 0)."""
    b = builder_for("tv.store_shared")
    t = tile_in(dst, "tv.store_shared destination", MemorySpace.SHARED)
    v = register_tile(value, "tv.store_shared value")
    if v.ndim != t.ndim:
        raise VMError(f"tv.store_shared: a {v.ndim}-d tile into a {t.ndim}-d tile")
    offs = offsets_of([0] * t.ndim if offsets is None else offsets, t.ndim, "tv.store_shared")
    check_inside(offs, v.tensor.type.static_shape, t.tensor.shape, "tv.store_shared")
    b.store_shared(t.tensor, v.tensor, offs)


def copy_async(dst: Any, src: Any, offsets: Any, multicast: bool = False) -> None:
    """Start copying the global tile `src[offsets + i]` (i over `dst`'s shape) into `dst`.

    `multicast=True` (with `tv.cluster(n)` and `tv.producer_warp()`): the blocks of a
    cluster all issue this copy with the same `src` and `offsets`, and the tile is read
    once for all of them; a block's `dst` receives the whole tile, as without it."""
    b = builder_for("tv.copy_async")
    d = tile_in(dst, "tv.copy_async destination", MemorySpace.SHARED)
    s = tile_in(src, "tv.copy_async source", MemorySpace.GLOBAL)
    if d.ndim != s.ndim:
        raise VMError(f"tv.copy_async: a {s.ndim}-d global tensor into a {d.ndim}-d tile")
    if not isinstance(multicast, bool):
        raise VMError(f"tv.copy_async(multicast=...) takes a bool, got "
                      f"{fv.describe(multicast)}")
    if multicast and (b.cluster == 1 or not b.producer_warps):
        raise VMError("tv.copy_async(multicast=True) needs tv.cluster(n) and "
                      "tv.producer_warp() first (the cluster's producer warps issue it)")
    b.copy_async(d.tensor, s.tensor, offsets_of(offsets, s.ndim, "tv.copy_async"), multicast)


def copy_async_commit() -> None:
    builder_for("tv.copy_async_commit").copy_async_commit()


def copy_async_wait(n: int = 0) -> None:
    b = builder_for("tv.copy_async_wait")
    n = fv.static_int(n, "tv.copy_async_wait n")
    if n < 0:
        raise VMError(f"tv.copy_async_wait n must be >= 0, got {n}")
    b.copy_async_wait(n)


def sync() -> None:
    builder_for("tv.sync").sync()


def cluster_sync() -> None:
    """Every thread of every block of this block's cluster (`tv.cluster(n)`) waits here
    for all the others; what each block wrote to its shared memory before it, the others
    read after it (`tv.load_shared(..., peer=)`)."""
    builder_for("tv.cluster_sync").cluster_sync()


def launch_dependents() -> None:
    """Let the next kernel on the stream start before this one ends, if it opted in
    (`tv.wait_prerequisites`); anywhere in the kernel, the earlier the more overlap.
    Nothing before sm_90, nor in the interpreter."""
    builder_for("tv.launch_dependents").launch_dependents()


def wait_prerequisites() -> None:
    """Wait for the kernels launched before this one to finish, their writes visible;
    with it the kernel opts in to starting before they end (programmatic dependent
    launch, sm_90 and later). At the top level of the kernel, before its first global
    write and its first read of anything an earlier kernel writes."""
    builder_for("tv.wait_prerequisites").wait_prerequisites()
