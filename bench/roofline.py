"""The quantized matmul benchmark's roofline: the protocol's minimum DRAM traffic and
FLOPs of a matmul, the two ceilings measured in the same run (device copy bandwidth,
cuBLAS f16 TFLOP/s), and the metrics derived from a timed row (TB/s, TFLOP/s, fraction
of the roofline, speedups over cuBLAS, fraction of the read floor)."""

from __future__ import annotations

from typing import Any

from tilevm.bench.protocol import ACTS, torch_dtype
from tilevm.bench.timing import Timer

SCALE_BYTES = 2  # one f16 (or bf16) scale per group and column


def traffic_bytes(M: int, N: int, K: int, bits: int, group_size: int | None,
                  scale_bytes: int = SCALE_BYTES) -> float:
    """The protocol's minimum DRAM traffic: packed weights, scales, x read, y written
    (f16/bf16 activations). `group_size` None: no scales (cuBLAS's 16-bit weights)."""
    scales = 0.0 if not group_size else (N * K / group_size) * scale_bytes
    return N * K * bits / 8 + scales + 2 * M * K + 2 * M * N


def matmul_flops(M: int, N: int, K: int) -> float:
    """Multiply-adds counted as two operations: 2*M*N*K."""
    return 2.0 * M * N * K


def roofline_seconds(nbytes: float, flops: float, copy_bw: float, peak_flops: float) -> float:
    """`max(bytes / copy_bw, flops / peak)`: the time at the better of the two ceilings."""
    return max(nbytes / copy_bw, flops / peak_flops)


def metrics(seconds: float, nbytes: float, flops: float, copy_bw: float,
            peak_flops: float) -> dict[str, float]:
    """us, TB/s, TFLOP/s, roofline time and fraction of it for one timed kernel."""
    t_roof = roofline_seconds(nbytes, flops, copy_bw, peak_flops)
    return {"us": seconds * 1e6, "tbps": nbytes / seconds / 1e12,
            "tflops": flops / seconds / 1e12, "t_roof_us": t_roof * 1e6,
            "roofline_fraction": t_roof / seconds,
            "bound": "memory" if nbytes / copy_bw >= flops / peak_flops else "compute"}



def _copy_seconds(timer: Timer, n: int) -> float:
    """Median time of a device-to-device copy of `n` bytes (its buffers freed on return)."""
    import torch

    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return timer(lambda: dst.copy_(src))[0]


def measure_ceilings(timer: Timer) -> dict[str, Any]:
    """Device copy bandwidth (1 GiB copied: bytes read + written per second) and cuBLAS
    TFLOP/s of an 8192^3 matmul, f16 (the roofline's peak) and bf16, on random data."""
    import torch

    n = 1 << 30
    t_copy = _copy_seconds(timer, n)
    out: dict[str, Any] = {"copy_bytes": n, "copy_s": t_copy,
                           "copy_bw_bytes_per_s": 2 * n / t_copy}
    s = 8192
    for act in ACTS:
        a = torch.randn(s, s, dtype=torch_dtype(act), device="cuda")
        b = torch.randn(s, s, dtype=torch_dtype(act), device="cuda")
        t = timer(lambda a=a, b=b: torch.matmul(a, b))[0]
        out[f"cublas_{act}_s"] = t
        out[f"cublas_{act}_tflops"] = matmul_flops(s, s, s) / t / 1e12
        del a, b
    torch.cuda.empty_cache()
    return out



def finish_row(row: dict, ceilings: dict, cublas_times: dict) -> dict:
    """Add the derived metrics (TB/s, TFLOP/s, roofline, speedups) to a timed row."""
    if row.get("seconds") is None:
        return row
    nbytes = traffic_bytes(row["M"], row["N"], row["K"], row["bits"], row["group_size"])
    flops = matmul_flops(row["M"], row["N"], row["K"])
    row.update(bytes=nbytes, flops=flops)
    row.update(metrics(row["seconds"], nbytes, flops, ceilings["copy_bw_bytes_per_s"],
                       ceilings["cublas_f16_tflops"] * 1e12))
    for act in ACTS:  # (cuBLAS timed the same way)
        base = cublas_times.get((row["shape"], row["M"], act, row.get("method", "isolated")))
        row[f"speedup_vs_cublas_{act}"] = base / row["seconds"] if base else None
    row["speedup_vs_cublas"] = row.get(f"speedup_vs_cublas_{row['act']}")
    return row


def add_read_floor(row: dict, floor_seconds: float) -> dict:
    """Add the read floor of a finished row's bytes (`bench.read_floor`): its time, the
    fraction of it the kernel reaches and the roofline fraction the floor itself reaches
    (`t_roof / t_floor`: above it no kernel reading these bytes was measured)."""
    row.update(floor_us=floor_seconds * 1e6, floor_fraction=floor_seconds / row["seconds"],
               attainable_roofline=row["t_roof_us"] / (floor_seconds * 1e6))
    return row


