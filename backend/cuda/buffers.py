"""Describing device buffers: what a launch needs of an array, from any producer.

`describe_buffer` reads a PyTorch tensor (`data_ptr()`), a `DeviceArray`, an object with
`__cuda_array_interface__` (CuPy, Numba) or one with DLPack (`__dlpack__` /
`__dlpack_device__`, e.g. JAX) into a `BufferInfo`: address, size, a normalized
element-type code ('f4', 'bf16', 'u1', ...), device and contiguity. No driver needed.
"""

from __future__ import annotations

import ctypes
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tilevm.backend.cuda.device_array import DeviceArray
from tilevm.backend.cuda.errors import ArgumentTypeError
from tilevm.dtypes import DataType

__all__ = ["BufferInfo", "describe_buffer", "TORCH_DTYPES", "CODE_NAMES", "code_itemsize",
           "is_torch_tensor"]


@dataclass(frozen=True)
class BufferInfo:
    """What the runtime needs of a device array. `dtype` is a normalized element-type
    code ('f4', 'f2', 'i1', 'u1', 'b1', 'bf16', 'f8e4m3', ..., see `CODE_NAMES`), `device`
    'cuda' or another device name, `device_id` the ordinal if known, `nbytes` the size."""

    address: int
    nbytes: int
    dtype: str
    dtype_name: str  # as the producer calls it, for messages
    device: str = "cuda"
    device_id: int | None = None
    contiguous: bool = True
    readonly: bool = False
    tilevm_dtype: DataType | None = None  # a DeviceArray's own dtype
    source: str = ""  # "torch", "DeviceArray", "__cuda_array_interface__", "DLPack"


# element-type codes: of torch dtypes (by name), DLPack types, and their readable names
TORCH_DTYPES = {
    "float16": "f2", "float32": "f4", "float64": "f8", "bfloat16": "bf16",
    "int8": "i1", "uint8": "u1", "int16": "i2", "uint16": "u2", "int32": "i4", "uint32": "u4",
    "int64": "i8", "uint64": "u8", "bool": "b1", "float8_e4m3fn": "f8e4m3",
    "float8_e5m2": "f8e5m2",
}
_DL_CODES = {0: "i", 1: "u", 2: "f"}
_DL_SPECIAL = {(4, 16): "bf16", (6, 8): "b1", (10, 8): "f8e4m3", (12, 8): "f8e5m2"}
CODE_NAMES = {"f2": "float16", "f4": "float32", "f8": "float64", "i1": "int8", "u1": "uint8",
              "i2": "int16", "u2": "uint16", "i4": "int32", "u4": "uint32", "i8": "int64",
              "u8": "uint64", "b1": "bool", "bf16": "bfloat16", "f8e4m3": "float8_e4m3fn",
              "f8e5m2": "float8_e5m2"}
_CUDA_DL_DEVICES = {2: "cuda", 13: "cuda_managed"}
_DL_DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan",
                    8: "metal", 10: "rocm", 13: "cuda_managed"}


def code_itemsize(code: str) -> int:
    """The bytes of one element of element-type code `code`."""
    if code in ("bf16",):
        return 2
    if code.startswith("f8e"):
        return 1
    return int(code[1:])


def _c_contiguous(shape: Sequence[int], strides: Sequence[int] | None, itemsize: int) -> bool:
    if strides is None:
        return True
    expected = itemsize
    for n, s in zip(reversed(list(shape)), reversed(list(strides))):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def is_torch_tensor(obj: Any) -> bool:
    """Whether `obj` is a PyTorch tensor (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def describe_buffer(obj: Any) -> BufferInfo | None:
    """The `BufferInfo` of a device-array-like object, or None if it is not one (a CPU
    array is described, with its device name, so the caller can say so)."""
    if isinstance(obj, DeviceArray):
        return BufferInfo(obj.ptr, obj.nbytes, obj.storage_code, f"DeviceArray[{obj.dtype}]",
                          "cuda", obj.device_id, True, False, obj.dtype, "DeviceArray")
    if is_torch_tensor(obj):
        name = str(obj.dtype).rsplit(".", 1)[-1]
        code = TORCH_DTYPES.get(name, f"torch.{name}")
        return BufferInfo(int(obj.data_ptr()), int(obj.numel()) * int(obj.element_size()),
                          code, f"torch.{name}", obj.device.type,
                          obj.device.index, bool(obj.is_contiguous()), False, None, "torch")
    try:
        cai = obj.__cuda_array_interface__
    except AttributeError:
        cai = None
    except Exception:  # e.g. a CPU tensor of some library raising on access
        cai = None
    if cai is not None:
        return _from_cai(cai)
    if hasattr(obj, "__dlpack_device__") and hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj)
    if type(obj).__module__ == "numpy" and hasattr(obj, "dtype"):
        return BufferInfo(0, 0, "", f"numpy.{obj.dtype}", "cpu", None, source="numpy")
    return None


def _from_cai(cai: Mapping[str, Any]) -> BufferInfo:
    typestr = str(cai["typestr"])
    if typestr[0] == ">":
        raise ArgumentTypeError(f"big-endian arrays ({typestr}) are not supported")
    kind, size = typestr[1], typestr[2:]
    code = f"{kind}{size}"
    shape = tuple(int(n) for n in cai["shape"])
    itemsize = int(size) if size.isdigit() else 1
    ptr, readonly = cai["data"]
    strides = cai.get("strides")
    contiguous = _c_contiguous(shape, strides, itemsize)
    if cai.get("mask") is not None:
        raise ArgumentTypeError("masked arrays (__cuda_array_interface__ 'mask') are not "
                                "supported")
    return BufferInfo(int(ptr or 0), math.prod(shape) * itemsize, code,
                      f"{typestr} ({CODE_NAMES.get(code, code)})", "cuda", None, contiguous,
                      bool(readonly), None, "__cuda_array_interface__")


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", _DLTensor)]


_DLPACK_FLAG_READ_ONLY = 1


def _capsule_pointer(capsule: Any, name: bytes) -> int | None:
    api = ctypes.pythonapi
    api.PyCapsule_IsValid.restype = ctypes.c_int
    api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
    if not api.PyCapsule_IsValid(capsule, name):
        return None
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return api.PyCapsule_GetPointer(capsule, name)


def _from_dlpack(obj: Any) -> BufferInfo:
    dev_type, dev_id = (int(v) for v in obj.__dlpack_device__())
    dev_name = _DL_DEVICE_NAMES.get(dev_type, f"dlpack-device-{dev_type}")
    if dev_type not in _CUDA_DL_DEVICES:
        return BufferInfo(0, 0, "", "DLPack tensor", dev_name, dev_id, source="DLPack")
    # The capsule is only read, never consumed: its destructor calls the producer's deleter.
    capsule = obj.__dlpack__()
    readonly = False
    address = _capsule_pointer(capsule, b"dltensor")
    if address is not None:
        t = _DLTensor.from_address(address)
    else:
        address = _capsule_pointer(capsule, b"dltensor_versioned")
        if address is None:
            raise ArgumentTypeError("__dlpack__() returned no DLPack capsule")
        managed = _DLManagedTensorVersioned.from_address(address)
        t = managed.dl_tensor
        readonly = bool(managed.flags & _DLPACK_FLAG_READ_ONLY)
    code_num, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    if lanes != 1:
        raise ArgumentTypeError(f"DLPack vector types (lanes={lanes}) are not supported")
    if (code_num, bits) in _DL_SPECIAL:
        code = _DL_SPECIAL[(code_num, bits)]
    elif code_num in _DL_CODES and bits % 8 == 0:
        code = f"{_DL_CODES[code_num]}{bits // 8}"
    else:
        code = f"dlpack(code={code_num}, bits={bits})"
    shape = [t.shape[i] for i in range(t.ndim)]
    itemsize = max(1, bits // 8)
    strides = ([t.strides[i] * itemsize for i in range(t.ndim)] if t.strides else None)
    contiguous = _c_contiguous(shape, strides, itemsize)
    data = (t.data or 0) + int(t.byte_offset)
    del capsule
    return BufferInfo(data, math.prod(shape) * itemsize, code,
                      f"DLPack {CODE_NAMES.get(code, code)}", "cuda", dev_id, contiguous,
                      readonly, None, "DLPack")

