"""The bound and the prediction of one launch: traffic (`cost.traffic`) and occupancy
(`cost.occupancy`) against a GPU's ceilings (`cost.hardware`).

Each term's time is its count over its ceiling: the DRAM bytes over the DRAM bandwidth
(reached only with enough warps resident per SM to keep bytes in flight: with `w` of
them, `min(1, w / gpu.dram_saturating_warps)` of it), each unit's operations over its
peak (a conversion counts as one FP32-pipe instruction, `fma_peak / 2` a second: no
public table gives the conversion rate; the tensor cores' FLOPs by instruction, those
of the warp-level `mma.sync` at `GPU.mma_sync_fraction` of the peak). The bound is the
largest term.

The prediction overlaps terms partly, by one rule: a set of terms that run at once
takes the largest of them plus `u = gpu.unoverlapped_fraction` of the others. The units
overlap so among themselves (the warps that convert weights also issue the tensor-core
instructions), giving the compute time `c`, scaled by the wave quantization (with `w`
waves of `s` slots and `b` blocks the units work `w` wave times where `b / s` would
suffice); then memory `m` (the DRAM term, not scaled: the blocks of a partial wave
share the bandwidth the others leave) and compute: `max(m, c) + u * min(m, c) + waves *
gpu.wave_latency_s`. The two constants are fitted on measured H100 candidates
(docs/cost-model.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tilevm.cost.hardware import GPU, UNITS
from tilevm.cost.occupancy import Occupancy, Waves, blocks_per_sm, waves
from tilevm.cost.traffic import Traffic, analyze_traffic
from tilevm.cost.walk import bind_scalars, launch_grid
from tilevm.ir.stmt import Program

__all__ = ["Resources", "Estimate", "estimate", "TERMS"]

TERMS = ("dram", "tensor_core", "fma", "convert")


@dataclass(frozen=True)
class Resources:
    """What a block of the compiled kernel holds: threads, registers per thread (ptxas's
    count) and shared bytes (the shared-memory plan's `total_bytes`)."""

    threads: int
    registers_per_thread: int
    shared_bytes: int

    @classmethod
    def of(cls, kernel: Any) -> Resources:
        """What a block of a loaded kernel (`backend.cuda.Kernel`) holds: its threads,
        ptxas's registers a thread (the driver's attribute), its shared bytes."""
        return cls(kernel.num_threads, kernel.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"),
                   kernel.shared_bytes)


@dataclass(frozen=True)
class Estimate:
    """A launch's counts, occupancy and times (seconds) by term, the bound and which term
    gives it, and the prediction (module docstring)."""

    gpu: GPU
    traffic: Traffic
    blocks: int
    resources: Resources
    occupancy: Occupancy
    waves: Waves
    seconds: Mapping[str, float]
    bound_term: str
    bound_s: float
    predicted_s: float

    def fraction_of_bound(self, measured_s: float) -> float:
        """How close a measured time comes to the bound (1.0: at the bound)."""
        if measured_s <= 0:
            raise ValueError(f"a measured time must be positive, got {measured_s}")
        return self.bound_s / measured_s

    def to_json(self) -> dict[str, Any]:
        """The launch as `vmc analyze --json` prints it (bytes and FLOPs as integers)."""
        transfers = {kind: int(n) for kind, n in self.traffic.total.items()}
        return {
            "gpu": self.gpu.name,
            "blocks": self.blocks,
            "transfers": transfers,
            "per_block": {kind: int(n) for kind, n in self.traffic.per_block.items()},
            "flops": {unit: int(n) for unit, n in self.traffic.flops.items()},
            "resources": {"threads": self.resources.threads,
                          "registers_per_thread": self.resources.registers_per_thread,
                          "shared_bytes": self.resources.shared_bytes},
            "occupancy": {"blocks_per_sm": self.occupancy.blocks_per_sm,
                          "limited_by": list(self.occupancy.limited_by),
                          "waves": self.waves.waves,
                          "last_wave_utilization": round(self.waves.last_wave_utilization,
                                                         4)},
            "seconds": {term: s for term, s in self.seconds.items()},
            "bound": {"term": self.bound_term, "us": self.bound_s * 1e6},
            "predicted_us": self.predicted_s * 1e6,
            "issued": {kind: int(n) for kind, n in self.traffic.issued.items()},
            "approximate": bool(self.traffic.approximate),
        }


def _rates(gpu: GPU) -> dict[str, float]:
    """Operations (bytes for dram) per second of each term: the table's peak of each unit
    it has one for (`GPU.peak`), and for conversions the FP32 pipe's instruction rate."""
    return {"dram": gpu.dram_bandwidth, **{unit: gpu.peak(unit) for unit in UNITS},
            "convert": gpu.fma_peak / 2}


def _overlapped(times: list[float], unoverlapped: float) -> float:
    """Terms that run at once: the largest, plus `unoverlapped` of the others."""
    return max(times) + unoverlapped * (sum(times) - max(times))


def estimate(program: Program, scalars: Mapping[str, int], gpu: GPU,
             resources: Resources) -> Estimate:
    """The estimate of launching `program` with these runtime scalars on `gpu`, its blocks
    holding `resources` (module docstring)."""
    occupancy = blocks_per_sm(gpu, resources.threads, resources.registers_per_thread,
                              resources.shared_bytes)
    blocks = math.prod(launch_grid(program, bind_scalars(program, scalars)))
    launch_waves = waves(gpu, blocks, occupancy.blocks_per_sm)
    traffic = analyze_traffic(program, scalars, l2_bytes=gpu.l2_bytes,
                              blocks_per_wave=launch_waves.slots)
    counts = {"dram": traffic.dram, **{u: traffic.flops.get(u, 0) for u in TERMS[1:]}}
    rates = _rates(gpu)
    resident_warps = min(blocks, launch_waves.slots) * -(-resources.threads // 32)
    rates["dram"] *= min(1.0, resident_warps / gpu.sm_count / gpu.dram_saturating_warps)
    seconds = {term: counts[term] / rates[term] for term in TERMS}
    warp_level = traffic.flops.get("mma_sync", 0)  # (the tensor cores by instruction)
    seconds["tensor_core"] = ((counts["tensor_core"] - warp_level) / rates["tensor_core"]
                              + warp_level / gpu.peak("mma_sync"))
    bound_term = max(TERMS, key=lambda term: seconds[term])
    bound = seconds[bound_term]
    ideal_waves = blocks / launch_waves.slots if launch_waves.slots else 0.0
    quantization = launch_waves.waves / ideal_waves if ideal_waves else 1.0
    compute = _overlapped([seconds[t] for t in TERMS[1:]], gpu.unoverlapped_fraction)
    predicted = _overlapped([seconds["dram"], compute * quantization],
                            gpu.unoverlapped_fraction) + launch_waves.waves * gpu.wave_latency_s
    return Estimate(gpu, traffic, blocks, resources, occupancy, launch_waves, seconds,
                    bound_term, bound, predicted)
