"""The CUDA driver: cuda-python's bindings, the calling thread's context, device facts.

The first call that needs the driver runs `cuInit` and, if the calling thread has no
current context, retains device 0's primary context (`TILEVM_DEVICE` picks another)
and pushes it. A context that is already current, e.g. PyTorch's (which is the primary
context of its current device), is used as it is, so tilevm and PyTorch/CuPy share
memory and streams. cuda-python is imported on first use (`bindings`), so everything
else of the runtime works, and its errors are clear, without it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from tilevm.backend.cuda.errors import CudaError, NoDriverError

__all__ = ["bindings", "call", "error_name", "error_text", "Context", "ensure_context",
           "device_attribute", "device_arch"]


_init_lock = threading.Lock()
_initialised = False
_primary: dict[int, Any] = {}


def bindings() -> Any:
    """cuda-python's driver module (`NoDriverError` without cuda-python)."""
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # cuda-python < 12.6
        except ImportError:
            raise NoDriverError("the GPU runtime needs cuda-python (`pip install cuda-python`)"
                                ) from None
    return driver


def error_name(drv: Any, err: Any) -> str:
    """The `CUresult` name of `err` (`CUDA_ERROR_...`)."""
    try:
        e, s = drv.cuGetErrorName(err)
        return s.decode() if isinstance(s, bytes) else str(s)
    except Exception:
        return str(err)


def error_text(drv: Any, err: Any) -> str:
    """The driver's description of `err` ("" if it has none)."""
    try:
        e, s = drv.cuGetErrorString(err)
        return s.decode() if isinstance(s, bytes) else str(s)
    except Exception:
        return ""


def call(what: str, result: Any) -> Any:
    """Unpack a cuda-python result tuple `(err, *values)`, raising `CudaError`."""
    drv = bindings()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        name = error_name(drv, err)
        raise CudaError(f"{what} failed: {name}: {error_text(drv, err)}", name)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@dataclass(frozen=True)
class Context:
    """A CUDA context and the ordinal of its device."""

    handle: Any
    device: int  # the device ordinal

    @property
    def arch(self) -> str:
        return device_arch(self.device)


def _init() -> Any:
    global _initialised
    drv = bindings()
    with _init_lock:
        if not _initialised:
            try:
                (err,) = drv.cuInit(0)
            except Exception as exc:  # no libcuda.so: cuda-python raises on first use
                raise NoDriverError(f"the CUDA driver could not be loaded ({exc}); the GPU "
                                    "runtime needs an NVIDIA GPU and driver") from None
            if err != drv.CUresult.CUDA_SUCCESS:
                raise NoDriverError(f"cuInit failed: {error_name(drv, err)}: "
                                    f"{error_text(drv, err)} (no usable GPU?)",
                                    error_name(drv, err))
            count = call("cuDeviceGetCount", drv.cuDeviceGetCount())
            if count == 0:
                raise NoDriverError("the CUDA driver reports no GPU")
            _initialised = True
    return drv


def ensure_context() -> Context:
    """The calling thread's current CUDA context, making the primary context of device
    `TILEVM_DEVICE` (default 0) current first if the thread has none."""
    drv = _init()
    ctx = call("cuCtxGetCurrent", drv.cuCtxGetCurrent())
    if ctx is not None and int(ctx) != 0:
        dev = call("cuCtxGetDevice", drv.cuCtxGetDevice())
        return Context(ctx, int(dev))
    ordinal = int(os.environ.get("TILEVM_DEVICE", "0"))
    dev = call(f"cuDeviceGet({ordinal})", drv.cuDeviceGet(ordinal))
    with _init_lock:
        if ordinal not in _primary:
            _primary[ordinal] = call("cuDevicePrimaryCtxRetain",
                                     drv.cuDevicePrimaryCtxRetain(dev))
        ctx = _primary[ordinal]
    call("cuCtxPushCurrent", drv.cuCtxPushCurrent(ctx))
    return Context(ctx, ordinal)


def device_attribute(attr_name: str, device: int) -> int:
    """A `CU_DEVICE_ATTRIBUTE_...` of device ordinal `device`."""
    drv = bindings()
    attr = getattr(drv.CUdevice_attribute, attr_name)
    dev = call("cuDeviceGet", drv.cuDeviceGet(device))
    return int(call(f"cuDeviceGetAttribute({attr_name})", drv.cuDeviceGetAttribute(attr, dev)))


def device_name(device: int | None = None) -> str:
    """The driver's name of a device ("NVIDIA H100 80GB HBM3"; the current context's by
    default)."""
    if device is None:
        device = ensure_context().device
    else:
        _init()
    drv = bindings()
    dev = call("cuDeviceGet", drv.cuDeviceGet(device))
    raw = call("cuDeviceGetName", drv.cuDeviceGetName(256, dev))
    name = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    return name.split("\x00", 1)[0].strip()


def device_arch(device: int | None = None) -> str:
    """The `sm_XY` name of a device (the current context's by default)."""
    if device is None:
        device = ensure_context().device
    else:
        _init()
    major = device_attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR", device)
    minor = device_attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR", device)
    return f"sm_{major}{minor}"

