"""Ready kernels built on the VM: the quantized matmul, its weight path and its tuner.

    from tilevm.kernels import quantize, quantized_matmul
    qw = quantize(w_kn.cuda(), "int4", group_size=128, format="fragments")
    y = quantized_matmul(x, qw)                   # x: CUDA f16/bf16 [..., K]

    from tilevm.kernels import QuantizedLinear    # (imports torch)
    layer = QuantizedLinear.from_linear(linear, "int3", group_size=64)

docs/quantized-matmul.md describes the kernel, the weight format and the measurements.
"""

from tilevm.kernels.matmul import quantized_matmul, tune, tuned_schedule
from tilevm.kernels.schedule import Schedule, candidates, default_schedule
from tilevm.kernels.weights import (
    FRAGMENTS,
    ROW_PACKED,
    QuantizedWeight,
    dequantize,
    encode,
    pack_weights,
    padded_n,
    quantize,
    unpack_weights,
)

__all__ = ["FRAGMENTS", "ROW_PACKED", "QuantizedLinear", "QuantizedWeight", "Schedule",
           "candidates", "default_schedule", "dequantize", "encode", "pack_weights",
           "padded_n", "quantize", "quantized_matmul", "tune", "tuned_schedule",
           "unpack_weights"]


def __getattr__(name: str):
    if name == "QuantizedLinear":  # torch is imported only when the layer is asked for
        from tilevm.kernels.linear import QuantizedLinear

        return QuantizedLinear
    raise AttributeError(f"module 'tilevm.kernels' has no attribute {name!r}")
