"""The GPUs the cost model knows: a `GPU` per product (`GPUS`, by name), its ceilings
(DRAM and shared-memory bandwidth, peak FLOP/s by unit) and the per-SM resource limits
that occupancy is computed from (`cost.occupancy`).

Where the numbers come from, by kind of field:

- SM count, boost clock, DRAM bandwidth, L2 size and peak rates: NVIDIA's datasheet of
  each product (the architecture whitepaper where the datasheet is silent). Datasheets
  give tensor-core rates "with sparsity" beside the dense ones; the table holds dense.
- Per-SM and per-block limits (threads, warps, blocks, registers, shared memory): the
  CUDA C++ Programming Guide's table of technical specifications per compute capability.
- Allocation granularities, the shared memory reserved per block, the register file's
  partitions and the block-barrier count: the CUDA Toolkit's occupancy calculator
  (`cuda_occupancy.h`), whose rules `cuOccupancyMaxActiveBlocksPerMultiprocessor` follows.

A datasheet ceiling is what the hardware is rated at, not what a kernel reaches: a bench
run's measured copy bandwidth and cuBLAS peak can replace them (`with_measured`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["GPU", "GPUS", "UNITS", "gpu", "gpu_for_device", "with_measured"]

#: The compute units a peak rate is given for: tensor cores (dense f16/bf16 products
#: summed in f32) and the FP32 FMA pipes (an FMA counts two FLOPs).
UNITS = ("tensor_core", "fma")

KIB = 1024
MIB = 1024 * 1024


@dataclass(frozen=True)
class GPU:
    """One GPU product: its ceilings and its per-SM resource limits."""

    name: str  # the table's key: "h100"
    product: str  # what NVIDIA calls it: "H100 SXM5 80GB"
    device_name: str  # how the driver's device name (`cuDeviceGetName`) ends
    arch: str  # the `--arch` the compiler targets on it: "sm_90a"
    sm_count: int
    clock_hz: float  # the maximum boost clock (what the driver reports as its clock rate)
    dram_bandwidth: float  # bytes/s
    l2_bytes: int
    tensor_peak: float  # FLOP/s, dense f16/bf16 with f32 accumulation
    fma_peak: float  # FLOP/s, FP32 FMA (two FLOPs each)
    # per SM
    threads_per_sm: int
    warps_per_sm: int
    blocks_per_sm: int
    registers_per_sm: int
    shared_bytes_per_sm: int  # the largest carve-out of the unified L1 / shared memory
    barriers_per_sm: int | None  # block barriers, where the occupancy rules count them
    # per block
    threads_per_block: int
    registers_per_block: int
    shared_bytes_per_block: int  # the opt-in maximum (above 48 KiB a kernel opts in)
    shared_reserved_per_block: int  # taken by the driver from every block's share
    # per thread
    registers_per_thread: int
    # allocation rules
    register_granularity: int  # registers are given to a warp in multiples of this
    register_partitions: int  # the register file is split between the SM's schedulers
    shared_granularity: int  # a block's shared memory is given in multiples of this
    shared_bytes_per_clock_per_sm: int = 128  # 32 banks, 4 bytes each, every clock
    # Resident warps per SM from which DRAM reads reach the full bandwidth: fewer keep
    # too few bytes in flight (Little's law). Fitted on an H100 (docs/cost-model.md).
    dram_saturating_warps: int = 8
    # What the prediction adds to the bound, fitted on the same H100 data: the part of
    # the smaller of memory and compute time that does not overlap the larger, and the
    # time each wave of blocks takes to fill and drain its pipelines.
    unoverlapped_fraction: float = 0.5
    wave_latency_s: float = 5e-6
    # The share of `tensor_peak` the warp-level `mma.sync` reaches (a `dot` with `b` in
    # registers; one with `b` shared is Hopper's `wgmma`, at the peak). 1.0 before sm_90,
    # where mma.sync is the peak's own instruction; on Hopper to be measured
    # (bench/exp_mma_rate.py) and 1.0 until then.
    mma_sync_fraction: float = 1.0
    #: the ceilings a measurement replaced (`with_measured`), for the reports to say so
    measured: frozenset[str] = frozenset()

    @property
    def sm(self) -> int:
        """The compute capability as one number: 90 for sm_90a."""
        return int(self.arch[3:5])

    @property
    def shared_bandwidth(self) -> float:
        """Bytes/s between shared memory and registers, all SMs together."""
        return self.sm_count * self.shared_bytes_per_clock_per_sm * self.clock_hz

    def peak(self, unit: str) -> float:
        """The peak FLOP/s of `unit` (one of `UNITS`, or "mma_sync": the tensor cores
        driven by the warp-level `mma.sync`)."""
        if unit == "tensor_core":
            return self.tensor_peak
        if unit == "mma_sync":
            return self.tensor_peak * self.mma_sync_fraction
        if unit == "fma":
            return self.fma_peak
        raise ValueError(f"unknown compute unit {unit!r}; known: {', '.join(UNITS)}, "
                         f"mma_sync")


# The limits every sm_80 / sm_89 / sm_90 part shares (Programming Guide: 64 K 32-bit
# registers per SM and per block, 255 per thread, 1024 threads per block; occupancy
# calculator: registers given per warp in units of 256 from one of the SM's 4 partitions,
# shared memory in units of 128 bytes with 1 KiB reserved per block from sm_80 on).
_COMMON = dict(
    registers_per_sm=64 * KIB, registers_per_block=64 * KIB, registers_per_thread=255,
    threads_per_block=1024, register_granularity=256, register_partitions=4,
    shared_granularity=128, shared_reserved_per_block=1 * KIB,
)

# Hopper (sm_90), Programming Guide: 2048 threads, 64 warps and 32 blocks per SM, 228 KiB
# of shared memory per SM of which 227 KiB for one block. Occupancy calculator: sm_90
# counts block barriers, two per resident block.
_HOPPER = dict(
    _COMMON, arch="sm_90a", sm_count=132, threads_per_sm=2048, warps_per_sm=64,
    blocks_per_sm=32, shared_bytes_per_sm=228 * KIB, shared_bytes_per_block=227 * KIB,
    barriers_per_sm=2 * 32, l2_bytes=50 * MIB,
    # H100 whitepaper: 1980 MHz max boost, at which 132 SMs x 128 FP32 lanes x 2 give
    # the datasheet's 67 TFLOP/s; its tensor rate is quoted at 1830 MHz (989.4 TFLOP/s
    # dense = 132 SMs x 4096 FLOP/clock x 1.83 GHz), the datasheet's 1979 sparse / 2.
    clock_hz=1980e6, tensor_peak=1979e12 / 2, fma_peak=67e12,
)

GPUS: dict[str, GPU] = {
    # H100 SXM5 80GB datasheet: 3.35 TB/s HBM3; 50 MB L2 (whitepaper; 50 MiB reported
    # by the driver).
    "h100": GPU(name="h100", product="H100 SXM5 80GB", device_name="H100 80GB HBM3",
                dram_bandwidth=3.35e12, **_HOPPER),
    # H200 SXM 141GB datasheet: the H100's GH100 with 141 GB of HBM3e at 4.8 TB/s; the
    # same SMs, clock and tensor rate (1979 TFLOP/s sparse). L2: 60 MiB as the driver
    # reports it (cudaDevAttrL2CacheSize 62,914,560 on an H200, 2026-11-28), 10 more
    # than the H100 enables of the die's.
    "h200": GPU(name="h200", product="H200 SXM 141GB", device_name="H200",
                dram_bandwidth=4.8e12, **{**_HOPPER, "l2_bytes": 60 * MIB}),
    # A100 SXM4 80GB datasheet: 2039 GB/s HBM2e, 312 TFLOP/s f16 tensor dense (624
    # sparse), 19.5 TFLOP/s FP32; whitepaper: 108 SMs, 1410 MHz boost, 40 MB L2.
    # Programming Guide, sm_80: 2048 threads, 64 warps, 32 blocks per SM, 164 KiB of
    # shared memory per SM, 163 KiB for one block. The occupancy calculator counts no
    # block barriers before sm_90.
    "a100": GPU(name="a100", product="A100 SXM4 80GB", device_name="A100-SXM4-80GB",
                arch="sm_80", sm_count=108, clock_hz=1410e6, dram_bandwidth=2039e9,
                l2_bytes=40 * MIB, tensor_peak=312e12, fma_peak=19.5e12,
                threads_per_sm=2048, warps_per_sm=64, blocks_per_sm=32,
                shared_bytes_per_sm=164 * KIB, shared_bytes_per_block=163 * KIB,
                barriers_per_sm=None, **_COMMON),
    # L40S datasheet: 142 SMs (RT cores, one per SM), 2520 MHz boost, 864 GB/s GDDR6,
    # f16/bf16 tensor 362.05 TFLOP/s dense (733 sparse), 91.6 TFLOP/s FP32; 96 MiB L2
    # (AD102 as in the L40). Programming Guide, sm_89: 1536 threads, 48 warps, 24 blocks
    # per SM, 100 KiB of shared memory per SM, 99 KiB for one block.
    "l40s": GPU(name="l40s", product="L40S", device_name="L40S",
                arch="sm_89", sm_count=142, clock_hz=2520e6, dram_bandwidth=864e9,
                l2_bytes=96 * MIB, tensor_peak=362.05e12, fma_peak=91.6e12,
                threads_per_sm=1536, warps_per_sm=48, blocks_per_sm=24,
                shared_bytes_per_sm=100 * KIB, shared_bytes_per_block=99 * KIB,
                barriers_per_sm=None, **_COMMON),
}


def gpu(name: str) -> GPU:
    """The table's entry `name` ("h100", "h200", "a100", "l40s"; any case)."""
    if not isinstance(name, str):
        raise TypeError(f"a GPU name is a string, got {name!r}")
    entry = GPUS.get(name.lower())
    if entry is None:
        raise ValueError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}")
    return entry


def gpu_for_device(device_name: str) -> GPU | None:
    """The entry whose `device_name` ends the driver's name of a device ("NVIDIA H100
    80GB HBM3" -> h100), or None for a GPU the table does not hold: an H100 PCIe or an
    H200 NVL has other SM counts, clocks or bandwidths than the SXM part it is named for."""
    found = [g for g in GPUS.values() if device_name.strip().endswith(g.device_name)]
    return found[0] if len(found) == 1 else None


def with_measured(gpu: GPU, *, copy_bandwidth: float | None = None,
                  tensor_peak: float | None = None, fma_peak: float | None = None) -> GPU:
    """`gpu` with ceilings a bench run measured in place of the datasheet's:
    `copy_bandwidth` (bytes read plus written per second by a device-to-device copy)
    replaces the DRAM bandwidth, `tensor_peak` (e.g. cuBLAS's f16 FLOP/s) and `fma_peak`
    the peak rates. The new value's `measured` names the replaced ceilings."""
    changes: dict[str, float] = {}
    for field, value in (("dram_bandwidth", copy_bandwidth), ("tensor_peak", tensor_peak),
                         ("fma_peak", fma_peak)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"a measured {field} is a number, got {value!r}")
        if not value > 0:
            raise ValueError(f"a measured {field} must be positive, got {value!r}")
        changes[field] = float(value)
    return dataclasses.replace(gpu, measured=gpu.measured | frozenset(changes), **changes)
