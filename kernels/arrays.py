"""Array operations of the weight path on numpy arrays and torch tensors alike.

The weight format (`kernels.weight_format`) and the quantizer (`kernels.weights`) are each
written once, over `array_ops(x)`: the handful of operations they need, computed in `x`'s
library and on its device. torch is optional: it is imported only once a torch tensor
exists (never at module import), so numpy users never load it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

    Array = np.ndarray | torch.Tensor
else:
    Array = Any

__all__ = ["Array", "NumpyOps", "TorchOps", "array_ops", "first_true", "is_float_array",
           "is_torch", "nbytes"]


def _torch_module() -> Any | None:
    """torch if it has been imported by someone (a tensor can exist only then), else None."""
    return sys.modules.get("torch")


def is_torch(x: object) -> bool:
    """Whether `x` is a torch tensor (without importing torch)."""
    torch = _torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


class NumpyOps:
    """The handful of array operations the weight path needs, on numpy."""

    is_torch = False

    @staticmethod
    def const(a: np.ndarray, like: Array) -> np.ndarray:
        return a

    @staticmethod
    def float64(x: Array) -> np.ndarray:
        return np.asarray(x, dtype=np.float64)

    @staticmethod
    def int64(x: Array) -> np.ndarray:
        return np.asarray(x).astype(np.int64)

    @staticmethod
    def uint8(x: Array) -> np.ndarray:
        return np.asarray(x).astype(np.uint8)

    @staticmethod
    def searchsorted(table: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.searchsorted(table, v, side="left")

    @staticmethod
    def clip(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
        return np.clip(x, lo, hi)

    @staticmethod
    def any(x: np.ndarray) -> bool:
        return bool(np.any(x))

    @staticmethod
    def stack(xs: list[np.ndarray]) -> np.ndarray:
        return np.stack(xs, axis=-1)

    @staticmethod
    def amax(x: np.ndarray, axis: int) -> np.ndarray:
        return x.max(axis=axis)

    @staticmethod
    def amin(x: np.ndarray, axis: int) -> np.ndarray:
        return x.min(axis=axis)

    where = staticmethod(np.where)
    signbit = staticmethod(np.signbit)
    isnan = staticmethod(np.isnan)
    isfinite = staticmethod(np.isfinite)
    abs = staticmethod(np.abs)
    rint = staticmethod(np.rint)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)


class TorchOps:
    """The same operations on torch tensors, on the tensor's device."""

    is_torch = True

    def __init__(self) -> None:
        import torch

        self.t = torch

    def const(self, a: np.ndarray, like: Array) -> torch.Tensor:
        return self.t.tensor(a, device=like.device)

    def float64(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.t.float64)

    def int64(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.t.int64)

    def uint8(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.t.uint8)

    def searchsorted(self, table: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.t.searchsorted(table, v.contiguous(), right=False)

    def clip(self, x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
        return self.t.clamp(x, lo, hi)

    def any(self, x: torch.Tensor) -> bool:
        return bool(x.any().item())

    def stack(self, xs: list[torch.Tensor]) -> torch.Tensor:
        return self.t.stack(xs, dim=-1)

    def amax(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return x.amax(dim=axis)

    def amin(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return x.amin(dim=axis)

    def where(self, cond: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
        return self.t.where(cond, a, b)

    def signbit(self, x: torch.Tensor) -> torch.Tensor:
        return self.t.signbit(x)

    def isnan(self, x: torch.Tensor) -> torch.Tensor:
        return self.t.isnan(x)

    def isfinite(self, x: torch.Tensor) -> torch.Tensor:
        return self.t.isfinite(x)

    def abs(self, x: torch.Tensor) -> torch.Tensor:
        return self.t.abs(x)

    def rint(self, x: torch.Tensor) -> torch.Tensor:
        return self.t.round(x)  # half to even, like np.rint

    def maximum(self, a: torch.Tensor, b: Any) -> torch.Tensor:
        return self.t.clamp(a, min=b) if not isinstance(b, self.t.Tensor) \
            else self.t.maximum(a, b)

    def minimum(self, a: torch.Tensor, b: Any) -> torch.Tensor:
        return self.t.clamp(a, max=b) if not isinstance(b, self.t.Tensor) \
            else self.t.minimum(a, b)


def array_ops(x: object) -> NumpyOps | TorchOps:
    """The operations for `x`'s library: torch's for a tensor, else numpy's."""
    return TorchOps() if is_torch(x) else NumpyOps()


def nbytes(x: Array) -> int:
    """Bytes of `x`'s elements."""
    return int(x.numel() * x.element_size()) if is_torch(x) else int(x.nbytes)


def is_float_array(x: Array) -> bool:
    """Whether `x` holds floating-point (or complex) values."""
    if is_torch(x):
        return bool(x.is_floating_point() or x.is_complex())
    return np.asarray(x).dtype.kind not in "biu"



def first_true(mask: Array) -> tuple[int, ...] | None:
    """The index of `mask`'s first true element in row-major order, or None if none is."""
    if is_torch(mask):
        found = mask.nonzero()
        return tuple(int(i) for i in found[0].tolist()) if len(found) else None
    found = np.argwhere(mask)
    return tuple(int(i) for i in found[0]) if len(found) else None
