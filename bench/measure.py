"""One configuration of the quantized matmul benchmark, measured: the launchable a
backend prepares (`Prepared`; `Unsupported` when it cannot run the configuration), the
check of its output against a float64 reference, and its timed runs (`run_prepared`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tilevm.bench.protocol import torch_dtype
from tilevm.bench.timing import Timer


class Unsupported(Exception):
    """A backend cannot run this configuration (the message says why); recorded as a skip."""


@dataclass
class Prepared:
    """A matmul ready to launch: `fn(x) -> y` on the current stream."""

    fn: Callable[[Any], Any]
    weight_bytes: int  # bytes of the packed weights and scales the kernel reads
    out: Any = None  # the buffer fn writes (poisoned before the check); None: fn allocates
    dequantized: Any = None  # float64 [K, N] the kernel implements, if not the Weights'
    compile: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def max_relative_error(got: Any, want: Any) -> float:
    """max |got - want| over max |want| (torch tensors; `want` float64)."""
    return float((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30))


def check(y: Any, reference: Any, tol: float) -> dict[str, Any]:
    """Compare a result with its float64 reference: max |y - ref| relative to rms(ref),
    which passes when finite and at most `tol` (see `protocol.tolerance`)."""
    import torch

    y64 = y.double()
    finite = bool(torch.isfinite(y64).all())
    diff = (y64 - reference).abs()
    max_abs = float(diff.max()) if finite else math.inf
    rms = float(reference.pow(2).mean().sqrt())
    rel = max_abs / max(rms, 1e-30)
    return {"check_passed": finite and rel <= tol, "max_abs_err": max_abs,
            "max_rel_err": rel, "tolerance": tol, "ref_rms": rms,
            "output_finite": finite}


def run_prepared(prep: Prepared, M: int, K: int, act: str, weights64: Any, timer: Timer,
                 generator: Any, tol: float, time_it: bool = True) -> dict[str, Any]:
    """Poison, run once on fresh x, check against float64 x @ weights64, then (with
    `time_it`) time it with `timer`."""
    import torch

    x = (torch.rand((M, K), device="cuda", generator=generator) * 2 - 1).to(torch_dtype(act))
    if prep.out is not None:
        prep.out.fill_(float("nan"))
    else:
        # fn allocates its output: leave a NaN block of that size in torch's cache, which
        # the allocation reuses, so stale correct data cannot pass the check.
        n = M * weights64.shape[1]
        torch.full((n,), float("nan"), dtype=torch_dtype(act), device="cuda")
    t0 = time.perf_counter()
    y = prep.fn(x)
    torch.cuda.synchronize()
    first_call = time.perf_counter() - t0
    result = check(y, x.double() @ weights64, tol)
    result["first_call_s"] = first_call
    del y
    if not result["check_passed"] or not time_it:
        return result
    seconds, reps, method = timer(lambda: prep.fn(x))
    # Host time to submit one launch (no sync in between): when it exceeds the kernel's
    # time, a real decode loop would be launch-bound, whatever the median says.
    t0 = time.perf_counter()
    for _ in range(20):
        prep.fn(x)
    host = (time.perf_counter() - t0) / 20
    torch.cuda.synchronize()
    result.update(seconds=seconds, reps=reps, timing=method, host_us_per_launch=host * 1e6)
    return result
