"""The one place the quantized matmul benchmark reaches tilevm (`tilevm_matmul_factory`):
`tilevm.kernels.quantized_matmul` on the benchmark's weights in the "fragments" format,
tuned on its first call, or, where that path fails, the example kernel
examples/quantized_matmul.py compiled with `tilevm.compile` on weights in its own format.
Compile times (cold, cached, first call) are recorded with each."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import numpy as np

import tilevm
from tilevm import dtypes, kernels
from tilevm.backend import launch
from tilevm.bench.examples import load_example
from tilevm.bench.measure import Prepared, Unsupported
from tilevm.bench.protocol import torch_dtype
from tilevm.bench.weights import Weights, pack_rows


def example_unsupported(wdtype: str, group_size: int, act: str, N: int, K: int) -> str | None:
    """Why examples/quantized_matmul.py cannot run this configuration, or None."""
    if act != "f16":
        return "the example kernel takes f16 activations only"
    if N % 8:
        return f"the example's weight format needs N % 8 == 0 (N={N})"
    if group_size % 32:
        return f"the example needs group_size % bk == 0 (bk=32, group_size={group_size})"
    if K % group_size:
        return f"the example needs K % group_size == 0 (K={K}, group_size={group_size})"
    if not 1 <= dtypes.parse(wdtype).bits <= 8:
        return f"{wdtype} is not a 1..8-bit type"
    return None


_EXAMPLE_MODULE: Any = None
_VARIANTS: dict[tuple[str, int], tuple[Any, dict]] = {}  # (wdtype, g) -> (kernel, times)


def example_module(fresh: bool = False) -> Any:
    """examples/quantized_matmul.py (bench may not import examples); a fresh copy has a
    fresh kernel object, with no cached specialization."""
    global _EXAMPLE_MODULE
    if _EXAMPLE_MODULE is not None and not fresh:
        return _EXAMPLE_MODULE
    module = load_example("quantized_matmul")
    if not fresh:
        _EXAMPLE_MODULE = module
    return module


def _example_variant(wdtype: str, group_size: int) -> tuple[Any, dict]:
    """The compiled example kernel for (wdtype, group_size) and its compile times: cold
    (the run's kernel cache starts empty) and cached (a fresh specialization, served from
    the on-disk cache, as a new process would see it)."""
    key = (wdtype, group_size)
    if key in _VARIANTS:
        return _VARIANTS[key]
    constants = {"wdtype": dtypes.parse(wdtype), "group_size": group_size}
    t0 = time.perf_counter()
    kernel = tilevm.compile(example_module().quantized_matmul, **constants)
    cold = time.perf_counter() - t0
    cached = None
    with contextlib.suppress(ImportError, AttributeError):
        # Forget the loaded module (kept alive by `kernel`) so the second compile goes
        # through specialization and the disk cache, not the in-process table.
        launch._LOADED.clear()
        t0 = time.perf_counter()
        tilevm.compile(example_module(fresh=True).quantized_matmul, **constants)
        cached = time.perf_counter() - t0
    times = {"wdtype": wdtype, "group_size": group_size, "cold_s": cold, "cached_s": cached,
             "via": "examples/quantized_matmul.py"}
    _VARIANTS[key] = (kernel, times)
    return _VARIANTS[key]


def kernels_package() -> Any:
    """`tilevm.kernels` when it provides `quantize` and `quantized_matmul`, else None."""
    if hasattr(kernels, "quantize") and hasattr(kernels, "quantized_matmul"):
        return kernels
    return None


def _from_kernels_package(w: Weights, act: str, M: int) -> Prepared:
    """The tilevm.kernels path: the generated codes and scales in the kernel's
    "fragments" format (packed on the GPU), `quantized_matmul(x, qw)` with tuning. The
    first call tunes (compiles and times every candidate schedule): its wall time is the
    "first call" figure; `cached_s` is a later call's host time (no compilation)."""
    import torch

    tdt = torch_dtype(act)
    K, N = w.K, w.N
    Np = kernels.padded_n(N)
    codes, scales = w.codes, w.scales.to(tdt)  # bf16 activations: bf16 scales
    if Np != N:
        codes = torch.nn.functional.pad(codes, (0, Np - N))
        scales = torch.nn.functional.pad(scales, (0, Np - N), value=1.0)
    qw = kernels.QuantizedWeight(kernels.pack_weights(codes, w.wdtype, kernels.FRAGMENTS),
                                 scales, None, w.wdtype, w.group_size, (K, N),
                                 format=kernels.FRAGMENTS)
    out = torch.empty((M, N), dtype=tdt, device="cuda")
    x = torch.rand((M, K), device="cuda").to(tdt)
    t0 = time.perf_counter()
    kernels.quantized_matmul(x, qw, out=out)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    kernels.quantized_matmul(x, qw, out=out)
    torch.cuda.synchronize()
    cached = time.perf_counter() - t0
    schedule = kernels.tuned_schedule(x, qw)

    def fn(x):
        return kernels.quantized_matmul(x, qw, out=out, schedule=schedule)

    deq = qw.dequantize().to(torch.float64)  # bf16 scales round the generated ones
    return Prepared(fn, int(qw.nbytes), out, deq,
                    {"wdtype": w.wdtype, "group_size": w.group_size, "cold_s": None,
                     "cached_s": cached, "first_call_s": first, "schedule": str(schedule),
                     "via": "tilevm.kernels"}, "tilevm.kernels")


_KERNELS_FAILED: list[str] = []  # why the tilevm.kernels path failed (tried once)


def tilevm_matmul_factory(wdtype: str, group_size: int, act_dtype: str, M: int, N: int,
                          K: int, weights: Weights) -> Prepared:
    """The one place the benchmark reaches tilevm: a launchable `x[M, K] -> y[M, N]` for
    these `weights` (raises `Unsupported` with the reason for a configuration it cannot
    run). Uses `tilevm.kernels` where it provides `quantize` and `quantized_matmul`,
    else the example kernel compiled with `tilevm.compile(kernel, wdtype=, group_size=)` on
    weights packed by the example's own format (`pack_weights`)."""
    import torch

    package = kernels_package()
    if package is not None and not _KERNELS_FAILED:
        try:
            return _from_kernels_package(weights, act_dtype, M)
        except Exception as err:
            _KERNELS_FAILED.append(f"{type(err).__name__}: {str(err)[:200]}")
    note = f"tilevm.kernels failed ({_KERNELS_FAILED[0]}); used the example" \
        if package is not None and _KERNELS_FAILED else ""
    reason = example_unsupported(wdtype, group_size, act_dtype, N, K)
    if reason:
        raise Unsupported(reason)
    example = example_module()
    bits = dtypes.parse(wdtype).bits
    packed = pack_rows(weights.codes, bits)
    # The GPU packer must produce the example's format: compare a few rows with it.
    rows = min(K, 16)
    want = example.pack_weights(weights.codes[:rows].cpu().numpy(), wdtype)
    if not np.array_equal(packed[:rows].cpu().numpy(), want):
        raise RuntimeError("pack_rows disagrees with the example's pack_weights")
    kernel, times = _example_variant(wdtype, group_size)
    scales = weights.scales
    y = torch.empty((M, N), dtype=torch.float16, device="cuda")

    def fn(x):
        kernel(x, packed, scales, y, M, N, K)
        return y

    nbytes = int(packed.numel() + scales.numel() * scales.element_size())
    return Prepared(fn, nbytes, y, None, times, note or "examples/quantized_matmul.py")
