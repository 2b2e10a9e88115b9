"""The CUDA stream a launch goes on.

`resolve_stream` takes a `torch.cuda.Stream`, a CuPy stream (`.ptr`), an object with
`__cuda_stream__`, a `CUstream` or an int handle; None means PyTorch's current stream
when PyTorch is imported and has initialised CUDA, else the default stream (0).
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["resolve_stream", "torch_current_stream"]


def resolve_stream(stream: Any) -> int:
    """The CUstream handle (an int) for `stream` (see the module docstring)."""
    if stream is None:
        torch = sys.modules.get("torch")
        if torch is not None:
            try:
                if torch.cuda.is_initialized():
                    return torch_current_stream(torch)
            except Exception:
                pass
        return 0
    if isinstance(stream, bool):
        raise TypeError("a stream is a stream object or an int handle, not a bool")
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        proto = stream.__cuda_stream__
        value = proto() if callable(proto) else proto
        return int(value[1]) if isinstance(value, tuple) else int(value)
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream / ExternalStream
        return int(stream.cuda_stream)
    if hasattr(stream, "ptr"):  # cupy.cuda.Stream
        return int(stream.ptr)
    try:
        return int(stream)  # a cuda-python CUstream
    except (TypeError, ValueError):
        raise TypeError(f"cannot use {type(stream).__name__} as a CUDA stream (pass a "
                        f"torch.cuda.Stream, a CuPy stream, a CUstream or an int handle)"
                        ) from None


def torch_current_stream(torch: Any) -> int:
    """PyTorch's current stream on its current device, as `torch.cuda.current_stream()`
    gives it, without building a `torch.cuda.Stream` (which would cost host time at
    every launch)."""
    c = torch._C
    raw = getattr(c, "_cuda_getCurrentRawStream", None)
    get_device = getattr(c, "_cuda_getDevice", None)
    if raw is not None and get_device is not None:
        return int(raw(get_device()))
    return int(torch.cuda.current_stream().cuda_stream)
