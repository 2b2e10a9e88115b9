"""Occupancy and waves: how many blocks of a kernel an SM holds at once, which resource
stops it holding more, and how a grid's blocks fall into waves over the GPU's SMs.

`blocks_per_sm` follows the rules of the CUDA occupancy calculator (`cuda_occupancy.h`,
which `cuOccupancyMaxActiveBlocksPerMultiprocessor` agrees with), each resource giving
the number of blocks it has room for and the smallest winning:

- warps: a block takes its threads rounded up to whole warps of the SM's warp slots.
- registers: a warp's registers (per thread x 32) are rounded up to the allocation unit
  and come from one of the register file's partitions (one per warp scheduler), so an SM
  holds `partitions x (registers per partition // registers per warp)` warps, in whole
  blocks. A block fits only if its warps, rounded up to a multiple of the partitions,
  fit the registers one block may have (the hardware's launch check).
- shared memory: a block's bytes plus the driver's reservation, rounded up to the
  allocation unit, out of the SM's largest carve-out (the driver picks the carve-out
  from the launch, and the largest never holds fewer blocks than a smaller one).
- blocks: the SM's limit on resident blocks.
- barriers (sm_90 on): the block barriers a block uses, out of the SM's.

The threads of a block need no rule of their own: they are counted as whole warps, and
every GPU of the table holds `32 x warps_per_sm` threads."""

from __future__ import annotations

from dataclasses import dataclass

from tilevm.cost.hardware import GPU

__all__ = ["Occupancy", "Waves", "RESOURCES", "blocks_per_sm", "waves"]

WARP_SIZE = 32
#: The hardware's limit on named barriers one block may use (`bar.sync 0..15`).
MAX_BARRIERS_PER_BLOCK = 16
#: The resources that bound the blocks per SM, in the order `Occupancy.limited_by` lists
#: them.
RESOURCES = ("warps", "registers", "shared memory", "blocks", "barriers")


@dataclass(frozen=True)
class Occupancy:
    """Blocks of one kernel resident on an SM at once."""

    blocks_per_sm: int
    warps_per_sm: int  # resident warps: blocks x warps per block
    max_warps_per_sm: int  # the SM's warp slots
    #: every resource that has room for no more blocks than `blocks_per_sm`, in the
    #: order of `RESOURCES`
    limited_by: tuple[str, ...]
    #: the blocks each resource has room for (a resource that bounds nothing, such as
    #: the registers of a kernel that uses none, is left out)
    blocks_by_resource: tuple[tuple[str, int], ...]

    @property
    def limiting(self) -> str:
        """The first resource that bounds the blocks per SM (`limited_by[0]`)."""
        return self.limited_by[0]

    @property
    def fraction(self) -> float:
        """Resident warps over the SM's warp slots (the calculator's "occupancy")."""
        return self.warps_per_sm / self.max_warps_per_sm


@dataclass(frozen=True)
class Waves:
    """A grid's blocks in waves: each wave fills every SM with `blocks_per_sm` blocks
    (`slots` in all), the last one only in part."""

    waves: int
    slots: int  # blocks per wave: SMs x blocks per SM
    last_wave_utilization: float  # the fraction of the last wave's slots it fills

    @property
    def utilization(self) -> float:
        """The fraction of all the waves' slots that the grid's blocks fill."""
        return (self.waves - 1 + self.last_wave_utilization) / self.waves


def _count(name: str, value: object, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < least:
        raise ValueError(f"{name} must be at least {least}, got {value}")
    return value


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def _register_limit(gpu: GPU, warps: int, registers_per_thread: int) -> int | None:
    """Blocks per SM the register file has room for (None: the kernel uses none)."""
    if registers_per_thread > gpu.registers_per_thread:
        raise ValueError(f"{registers_per_thread} registers per thread exceed the "
                         f"{gpu.registers_per_thread} a thread may have on {gpu.product}")
    if registers_per_thread == 0:
        return None
    per_warp = _round_up(registers_per_thread * WARP_SIZE, gpu.register_granularity)
    if per_warp * _round_up(warps, gpu.register_partitions) > gpu.registers_per_block:
        raise ValueError(
            f"a block of {warps} warps at {registers_per_thread} registers per thread "
            f"({per_warp} a warp) does not fit the {gpu.registers_per_block} registers "
            f"of one block on {gpu.product}")
    partition = gpu.registers_per_sm // gpu.register_partitions
    return (partition // per_warp) * gpu.register_partitions // warps


def _shared_limit(gpu: GPU, shared_bytes: int) -> int | None:
    """Blocks per SM the shared memory has room for (None: no block takes any)."""
    if _round_up(shared_bytes, gpu.shared_granularity) > gpu.shared_bytes_per_block:
        raise ValueError(f"{shared_bytes} bytes of shared memory per block exceed the "
                         f"{gpu.shared_bytes_per_block} one block may have on {gpu.product}")
    allocated = _round_up(shared_bytes + gpu.shared_reserved_per_block,
                          gpu.shared_granularity)
    return gpu.shared_bytes_per_sm // allocated if allocated else None


def blocks_per_sm(gpu: GPU, threads_per_block: int, registers_per_thread: int,
                  shared_bytes_per_block: int, *, barriers_per_block: int = 1) -> Occupancy:
    """How many blocks of `threads_per_block` threads, each thread with
    `registers_per_thread` registers (ptxas's count) and each block with
    `shared_bytes_per_block` bytes of shared memory (static and dynamic together) and
    `barriers_per_block` block barriers, one SM of `gpu` holds at once, and what limits
    them. `ValueError` for a block that does not fit an SM at all."""
    threads = _count("threads_per_block", threads_per_block, 1)
    registers = _count("registers_per_thread", registers_per_thread, 0)
    shared = _count("shared_bytes_per_block", shared_bytes_per_block, 0)
    barriers = _count("barriers_per_block", barriers_per_block, 0)
    if threads > gpu.threads_per_block:
        raise ValueError(f"{threads} threads per block exceed the {gpu.threads_per_block} "
                         f"a block may have on {gpu.product}")
    if barriers > MAX_BARRIERS_PER_BLOCK:
        raise ValueError(f"{barriers} barriers per block exceed the "
                         f"{MAX_BARRIERS_PER_BLOCK} a block may use")
    warps = -(-threads // WARP_SIZE)
    limits: dict[str, int | None] = {
        "warps": gpu.warps_per_sm // warps,
        "registers": _register_limit(gpu, warps, registers),
        "shared memory": _shared_limit(gpu, shared),
        "blocks": gpu.blocks_per_sm,
        "barriers": (gpu.barriers_per_sm // barriers
                     if gpu.barriers_per_sm is not None and barriers else None),
    }
    bounded = tuple((name, n) for name, n in limits.items() if n is not None)
    blocks = min(n for _, n in bounded)
    if blocks == 0:  # a table whose per-block limits exceed its per-SM ones
        raise ValueError(f"a block of {threads} threads, {registers} registers per thread "
                         f"and {shared} bytes of shared memory does not fit one SM of "
                         f"{gpu.product}: {dict(bounded)}")
    return Occupancy(
        blocks_per_sm=blocks, warps_per_sm=blocks * warps, max_warps_per_sm=gpu.warps_per_sm,
        limited_by=tuple(name for name, n in bounded if n == blocks),
        blocks_by_resource=bounded)


def waves(gpu: GPU, blocks: int, blocks_per_sm: int) -> Waves:
    """How a grid of `blocks` blocks runs on `gpu` with `blocks_per_sm` resident per SM:
    the number of waves (rounded up) and how full the last one is."""
    blocks = _count("blocks", blocks, 1)
    per_sm = _count("blocks_per_sm", blocks_per_sm, 1)
    slots = gpu.sm_count * per_sm
    count = -(-blocks // slots)
    return Waves(waves=count, slots=slots,
                 last_wave_utilization=(blocks - (count - 1) * slots) / slots)
