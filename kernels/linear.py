"""`QuantizedLinear`: a PyTorch layer `y = x @ W^T (+ bias)` whose weight is quantized
and multiplied by the VM kernel (`kernels.matmul.quantized_matmul`).

torch is optional for tilevm, and a layer class must derive from `torch.nn.Module`, so
the class is made on its first use (`tilevm.kernels.QuantizedLinear`, or `from
tilevm.kernels.linear import QuantizedLinear`): importing this module imports no torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING

from tilevm.dtypes import DataType
from tilevm.kernels.matmul import (
    quantized_matmul,
    register_torch_op,
    remember_weights,
    warmup,
)
from tilevm.kernels.weight_format import FRAGMENTS
from tilevm.kernels.weights import QuantizedWeight, quantize

if TYPE_CHECKING:
    import torch

def __getattr__(name: str) -> type:
    if name == "QuantizedLinear":
        return quantized_linear_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@cache
def quantized_linear_class() -> type:
    """The `QuantizedLinear` class (made once; this imports torch)."""
    import torch

    register_torch_op()  # its forward is `tilevm::quantized_matmul` when traced

    class QuantizedLinear(torch.nn.Module):
        """Like `torch.nn.Linear(in_features, out_features)`, with the weight held as b-bit
        codes and per-group scales. Build it from a float layer or weight:

            layer = QuantizedLinear.from_linear(linear, "int4", group_size=128)
            y = layer(x)            # x: CUDA f16/bf16 [..., in_features]

        `weight` follows torch's `[out_features, in_features]` convention; the kernel's `W` is
        its transpose `[K = in_features, N = out_features]`."""

        def __init__(self, qweight: QuantizedWeight, bias: torch.Tensor | None = None) -> None:
            super().__init__()
            if qweight.format != FRAGMENTS:
                raise ValueError("QuantizedLinear needs weights in the 'fragments' format")
            self.qweight = qweight
            remember_weights(qweight)  # for `tilevm::quantized_matmul` when traced
            self.in_features, self.out_features = qweight.shape
            self.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)

        @classmethod
        def from_weight(cls, weight: torch.Tensor, dtype: DataType | str, group_size: int = 128,
                        *, bias: torch.Tensor | None = None, zero_point: bool = False,
                        device: torch.device | str | None = None) -> QuantizedLinear:
            """Quantize a float `weight[out_features, in_features]` (on `device`, default
            its own; quantizing on the GPU is fast)."""
            w = weight.detach().to(device or weight.device)
            if bias is not None:
                bias = bias.detach().to(device=w.device, dtype=w.dtype if w.dtype in (
                    torch.float16, torch.bfloat16) else torch.float16)
            qw = quantize(w.t(), dtype, group_size, zero_point=zero_point,
                          scale_dtype="bf16" if w.dtype == torch.bfloat16 else "f16",
                          format=FRAGMENTS)
            return cls(qw, bias)

        @classmethod
        def from_linear(cls, linear: torch.nn.Linear, dtype: DataType | str, group_size: int = 128,
                        *, zero_point: bool = False,
                        device: torch.device | str | None = None) -> QuantizedLinear:
            return cls.from_weight(linear.weight, dtype, group_size, bias=linear.bias,
                                   zero_point=zero_point, device=device)

        def warmup(self, rows: Iterable[int]) -> None:
            """Tune and prepare the calls of x with each of these row counts (before a
            CUDA graph capture or `torch.compile`, which cannot tune): `kernels.warmup`."""
            warmup(self.qweight, rows)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = quantized_matmul(x, self.qweight)
            return y if self.bias is None else y + self.bias

        def extra_repr(self) -> str:
            q = self.qweight
            return (f"in_features={self.in_features}, out_features={self.out_features}, "
                    f"dtype={q.dtype}, group_size={q.group_size}, zero_point={q.zeros is not None}")

    # Named (printed, pickled) as this module's attribute, which `__getattr__` serves.
    QuantizedLinear.__module__, QuantizedLinear.__qualname__ = __name__, "QuantizedLinear"
    return QuantizedLinear
