"""The quantized matmul benchmark's baselines on the same configurations: cuBLAS
(`torch.matmul` on 16-bit weights of the activation type) and, where they import, the
quantized peers (`PEERS`): the Triton low-bit matmul gemlite (integer weights of 1/2/4/8
bits, HQQ format) and Humming (vllm-project/humming, JIT CUDA C++ for any weight type up
to 8 bits), installed from `bench/wheels/` when asked (the GPU machine has no network)."""

from __future__ import annotations

import functools
import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

from tilevm import dtypes
from tilevm.bench.measure import Prepared, Unsupported
from tilevm.bench.protocol import torch_dtype
from tilevm.bench.weights import Weights, decode_table, row_chunks

WHEELS = Path(__file__).resolve().parent / "wheels"


def cublas_factory(act: str, M: int, N: int, K: int, generator: Any) -> tuple[Prepared, Any]:
    """torch.matmul(x, W^T) with W [N, K] of the activation type (the F.linear layout);
    returns the launchable and its float64 weights [K, N] for the reference."""
    import torch

    w = (torch.rand((N, K), device="cuda", generator=generator) * 2 - 1).to(torch_dtype(act))
    out = torch.empty((M, N), dtype=torch_dtype(act), device="cuda")

    def fn(x):
        return torch.matmul(x, w.t(), out=out)

    return Prepared(fn, int(w.numel() * 2), out, None, {}, "torch.matmul"), w.t().double()



GEMLITE_BITS = {"int8": 8, "int4": 4, "uint4": 4, "int2": 2, "uint2": 2}


def gemlite_unsupported(wdtype: str, group_size: int, act: str, N: int, K: int) -> str | None:
    """Why gemlite (integer weights of 1/2/4/8 bits, HQQ format) cannot run this, or None."""
    if wdtype not in GEMLITE_BITS:
        return f"gemlite has no {wdtype} weights (integer 1/2/4/8-bit only)"
    if K % 32 or K % group_size or group_size < 16:
        return f"gemlite needs K % 32 == 0, K % group_size == 0, group_size >= 16 " \
               f"(K={K}, group_size={group_size})"
    return None



PEER_MODULES = {"gemlite": "gemlite", "humming": "humming"}
_STATUS: dict[str, dict[str, Any]] = {}


@functools.cache
def _install_wheels() -> str:
    """pip install --no-deps --no-index every wheel in bench/wheels, once."""
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
           *map(str, sorted(WHEELS.glob("*.whl")))]
    done = subprocess.run(cmd, capture_output=True, text=True)
    importlib.invalidate_caches()
    return "ok" if done.returncode == 0 else \
        f"failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-300:]}"


def peer_status(name: str, install_wheels: bool = False) -> dict[str, Any]:
    """Whether the peer `name` (of `PEER_MODULES`) imports (after installing bench/wheels
    when asked), its version, and why not."""
    if name in _STATUS:
        return _STATUS[name]
    info: dict[str, Any] = {"wheels": sorted(p.name for p in WHEELS.glob("*.whl"))}
    if install_wheels and info["wheels"]:
        info["install"] = _install_wheels()
    try:
        module = importlib.import_module(PEER_MODULES[name])
        info.update(available=True, version=getattr(module, "__version__", "?"))
    except Exception as err:  # not installed, or something it needs is missing
        info.update(available=False, reason=f"{type(err).__name__}: {err}",
                    how="python -m pip install --no-deps bench/wheels/*.whl (the GPU "
                        "machine has no network; bench/wheels/README.md), or run with "
                        "--install-wheels")
    _STATUS[name] = info
    return info


def _require(name: str) -> None:
    status = _STATUS.get(name, {})
    if not status.get("available"):
        raise Unsupported(f"{name} unavailable: {status.get('reason', 'not probed')}")


def gemlite_factory(w: Weights, act: str, M: int) -> Prepared:
    """gemlite's GemLiteLinear on the same weights: integer codes become HQQ's unsigned
    `W_q` with zero point -min (W = (W_q - zero) * scale), scales and zeros [N, K/g]."""
    import torch

    reason = gemlite_unsupported(w.wdtype, w.group_size, act, w.N, w.K)
    if reason:
        raise Unsupported(reason)
    _require("gemlite")
    from gemlite import DType, GemLiteLinear

    t = dtypes.parse(w.wdtype)
    offset = -int(t.min)  # int4: codes of -8..7 become W_q of 0..15 with zero point 8
    values = torch.as_tensor(decode_table(w.wdtype), device="cuda")
    q = torch.empty((w.N, w.K), dtype=torch.uint8, device="cuda")
    for rows in row_chunks(w.K, w.N):
        q[:, rows] = (values[w.codes[rows].long()] + offset).to(torch.uint8).t()
    dt = torch_dtype(act)
    scales = w.scales.t().contiguous().to(dt)
    zeros = torch.full_like(scales, float(offset))
    gd = {"f16": DType.FP16, "bf16": DType.BF16}[act]
    layer = GemLiteLinear(GEMLITE_BITS[w.wdtype], group_size=w.group_size, in_features=w.K,
                          out_features=w.N, input_dtype=gd, output_dtype=gd)
    layer.pack(q, scales, zeros, bias=None)
    del q
    nbytes = sum(int(t.numel() * t.element_size()) for t in (layer.W_q, layer.scales)
                 if isinstance(t, torch.Tensor))
    return Prepared(layer, nbytes, None, None, {}, f"gemlite {_STATUS['gemlite']['version']}")


def humming_dtype(wdtype: str) -> str:
    """Humming's name of a weight type: int4, uint4, ... as ours; f6e3m2 -> float6e3m2."""
    return f"float{wdtype[1:]}" if wdtype.startswith("f") else wdtype


def humming_unsupported(wdtype: str, group_size: int, act: str, N: int, K: int) -> str | None:
    """Why Humming cannot run this, or None."""
    if dtypes.parse(wdtype).bits > 8:
        return f"Humming takes weights of up to 8 bits, not {wdtype}"
    if K % group_size:
        return f"Humming needs K % group_size == 0 (K={K}, group_size={group_size})"
    return None


def humming_factory(w: Weights, act: str, M: int) -> Prepared:
    """Humming's HummingLayer (group scales of the activation type; zero points for
    unsigned integer types) holding our weights as it quantizes them: the float weights
    go through its own quantizer, and the reference multiplies by its own dequantization
    of the result (it may choose other codes and scales than ours)."""
    import torch

    reason = humming_unsupported(w.wdtype, w.group_size, act, w.N, w.K)
    if reason:
        raise Unsupported(reason)
    _require("humming")
    from humming.layer import HummingLayer
    from humming.schema import HummingWeightSchema

    dt = torch_dtype(act)
    config = {"dtype": humming_dtype(w.wdtype), "group_size": w.group_size,
              "has_zero_point": w.wdtype.startswith("uint"),
              "scale_dtype": {"f16": "float16", "bf16": "bfloat16"}[act]}
    with torch.device("cuda"):
        layer = HummingLayer(shape_n=w.N, shape_k=w.K, weight_config=config, torch_dtype=dt)
    # Humming's quantizer views its input in groups: it needs [N, K] contiguous
    weights_nk = w.dequantized.t().contiguous().float()
    tensors = HummingWeightSchema.quant_tensor(weights_nk, layer.weight_schema, dt)
    dequantized = layer.weight_schema.dequant_tensors(tensors).t().double()  # [K, N]
    nbytes = sum(int(t.numel() * t.element_size()) for t in tensors.values())
    layer.load_from_tensors(tensors)
    del tensors
    layer.transform()
    return Prepared(layer, nbytes, None, dequantized, {},
                    f"humming {_STATUS['humming']['version']}")
