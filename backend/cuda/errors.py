"""The errors of the GPU runtime: bad launch arguments, and failures of the CUDA driver.

`ArgumentTypeError` and `ArgumentValueError` are `VMError`s (and a `TypeError` /
`ValueError`) raised before anything is launched, naming the parameter; `CudaError` and
its subclasses carry the driver's `CUresult` name.
"""

from __future__ import annotations

from tilevm.ir.errors import VMError

__all__ = ["ArgumentTypeError", "ArgumentValueError", "CudaError", "NoDriverError",
           "ModuleLoadError"]


class ArgumentTypeError(VMError, TypeError):
    """A launch argument of the wrong kind or dtype, or on the wrong device."""


class ArgumentValueError(VMError, ValueError):
    """A launch argument with a bad value: misaligned, too small, out of range, ..."""


class CudaError(RuntimeError):
    """A CUDA driver call failed. `code` is the `CUresult` name."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class NoDriverError(CudaError):
    """cuda-python, the CUDA driver or a GPU is missing."""


class ModuleLoadError(CudaError):
    """The driver rejected a PTX module; `log` is the JIT's error log."""

    def __init__(self, message: str, code: str | None = None, log: str = "") -> None:
        super().__init__(message, code)
        self.log = log

