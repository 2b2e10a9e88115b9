"""Ready kernels built on the VM: the quantized matmul, its weight path and its tuner.

    from tilevm.kernels import quantize, quantized_matmul
    qw = quantize(w_kn.cuda(), "int4", group_size=128, format="fragments")
    y = quantized_matmul(x, qw)                   # x: CUDA f16/bf16 [..., K]

    from tilevm.kernels import QuantizedLinear    # (imports torch)
    layer = QuantizedLinear.from_linear(linear, "int3", group_size=64)

docs/quantized-matmul.md describes the kernel, the weight format and the measurements.
"""

from tilevm.kernels import linear
from tilevm.kernels.matmul import (
    quantized_matmul,
    set_dependent_launch,
    tune,
    tuned_schedule,
    warmup,
)
from tilevm.kernels.schedule import Schedule
from tilevm.kernels.tilings import candidates, default_schedule
from tilevm.kernels.weight_format import (
    FRAGMENTS,
    ROW_PACKED,
    pack_weights,
    padded_n,
    unpack_weights,
)
from tilevm.kernels.weights import QuantizedWeight, dequantize, encode, quantize

__all__ = ["FRAGMENTS", "ROW_PACKED", "QuantizedLinear", "QuantizedWeight", "Schedule",
           "candidates", "default_schedule", "dequantize", "encode", "pack_weights",
           "padded_n", "quantize", "quantized_matmul", "set_dependent_launch", "tune",
           "tuned_schedule", "unpack_weights", "warmup"]


def __getattr__(name: str) -> type:
    if name == "QuantizedLinear":  # a torch module: torch is imported on this first use
        return linear.QuantizedLinear
    raise AttributeError(f"module 'tilevm.kernels' has no attribute {name!r}")
