"""`DeviceArray`: a small contiguous GPU buffer of tilevm elements (cuda-python driver API).

    from tilevm.backend.cuda.device_array import DeviceArray
    x = DeviceArray.from_numpy(np.arange(8, dtype=np.float32))      # f32[8]
    w = DeviceArray.from_numpy(dtypes.pack(codes, 4), dtype="int4", shape=(len(codes),))
    out = DeviceArray.empty((8,), "f32"); ...; out.to_numpy()

An array has a tilevm `DataType` and a logical shape (elements). Its bytes are stored as
the interpreter's host arrays are (`host_dtype`): float16/float32 for f16/f32, the
numpy integer types for 8..64-bit integers, uint16 codes for bf16, uint8 codes for
8-bit float formats, and uint8 *densely packed bytes* for sub-byte types (element i
at bits [i*b, (i+1)*b), `tilevm.dtypes.pack`); `to_numpy()` gives that host array
(1-D packed bytes for sub-byte types). `__cuda_array_interface__` (version 3) exposes the
storage: its shape for byte-sized elements, `(nbytes,)` uint8 for sub-byte types.

Memory is freed by `free()`, or when the array is garbage collected.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tilevm.backend.cuda import driver
from tilevm.dtypes import DataType, host_dtype, packed_size, parse

__all__ = ["DeviceArray", "host_dtype"]

# Host arrays follow `tilevm.dtypes.host_dtype`; without a dtype, a numpy array maps back:
_FROM_NUMPY = {"float16": "f16", "float32": "f32", "int8": "int8", "uint8": "uint8",
               "int16": "int16", "uint16": "uint16", "int32": "int32", "uint32": "uint32",
               "int64": "int64", "uint64": "uint64"}


def _shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if not all(isinstance(n, (int, np.integer)) and n >= 0 for n in dims):
        raise ValueError(f"a shape is a tuple of non-negative ints, got {shape!r}")
    return tuple(int(n) for n in dims)


def _nbytes(shape: tuple[int, ...], dtype: DataType) -> int:
    count = math.prod(shape)
    return packed_size(count, dtype.bits) if dtype.bits < 8 else count * (dtype.bits // 8)


class DeviceArray:
    """A contiguous device buffer holding `shape` elements of `dtype`."""

    def __init__(self, shape: int | Sequence[int], dtype: DataType | str, *,
                 _ptr: int | None = None) -> None:
        self.dtype: DataType = parse(dtype)
        self.shape: tuple[int, ...] = _shape(shape)
        self.nbytes: int = _nbytes(self.shape, self.dtype)
        ctx = driver.ensure_context()
        self.device_id: int = ctx.device
        self._ctx = ctx
        self.ptr: int = 0
        if _ptr is not None:
            self.ptr = _ptr
        elif self.nbytes:
            drv = driver.bindings()
            self.ptr = int(driver.call(f"cuMemAlloc({self.nbytes})",
                                        drv.cuMemAlloc(self.nbytes)))

    # ---- construction ----------------------------------------------------------------------
    @classmethod
    def empty(cls, shape: int | Sequence[int], dtype: DataType | str) -> DeviceArray:
        """Uninitialised memory."""
        return cls(shape, dtype)

    @classmethod
    def zeros(cls, shape: int | Sequence[int], dtype: DataType | str) -> DeviceArray:
        out = cls(shape, dtype)
        if out.nbytes:
            drv = driver.bindings()
            driver.call("cuMemsetD8", drv.cuMemsetD8(out.ptr, 0, out.nbytes))
        return out

    @classmethod
    def from_numpy(cls, array: np.ndarray, dtype: DataType | str | None = None,
                   shape: int | Sequence[int] | None = None) -> DeviceArray:
        """Copy a host array to the device.

        Without `dtype`, the tilevm type is the numpy one's (float16/float32 and the
        integer types). With `dtype`, `array` must be in `host_dtype(dtype)` form (for a
        sub-byte type: uint8 or int8 packed bytes; `shape` then gives the element count,
        by default every whole element the bytes hold)."""
        array = np.asarray(array)
        if dtype is None:
            name = _FROM_NUMPY.get(array.dtype.name)
            if name is None:
                raise TypeError(f"no tilevm type for numpy {array.dtype}; pass dtype= (and "
                                f"the array in host form, see host_dtype)")
            dt = parse(name)
        else:
            dt = parse(dtype)
        want = host_dtype(dt)
        if dt.bits < 8 and array.dtype == np.int8:
            array = array.view(np.uint8)
        if array.dtype != want:
            how = "densely packed bytes" if dt.bits < 8 else "codes" if dt.is_float and \
                want.kind == "u" else "values"
            raise TypeError(f"a host array for {dt} holds {want} ({how}), got {array.dtype}")
        if array.dtype.byteorder == ">":
            raise TypeError("big-endian arrays are not supported")
        array = np.ascontiguousarray(array)
        if dt.bits < 8:
            count = array.size * 8 // dt.bits if shape is None else math.prod(_shape(shape))
            shp = (count,) if shape is None else _shape(shape)
            need = packed_size(math.prod(shp), dt.bits)
            if array.size < need:
                raise ValueError(f"{math.prod(shp)} {dt} elements need {need} bytes, the "
                                 f"array has {array.size}")
            array = array.reshape(-1)[:need]
        else:
            shp = array.shape if shape is None else _shape(shape)
            if math.prod(shp) != array.size:
                raise ValueError(f"shape {shp} does not match the array's {array.size} "
                                 f"elements")
        out = cls(shp, dt)
        if out.nbytes:
            drv = driver.bindings()
            driver.call("cuMemcpyHtoD", drv.cuMemcpyHtoD(out.ptr, array, out.nbytes))
        return out

    # ---- access ------------------------------------------------------------------------------
    def to_numpy(self) -> np.ndarray:
        """Copy to the host, in `host_dtype` form (1-D packed bytes for sub-byte types)."""
        self._check_live()
        want = host_dtype(self.dtype)
        if self.dtype.bits < 8:
            host = np.empty(self.nbytes, dtype=np.uint8)
        else:
            host = np.empty(self.shape, dtype=want)
        if self.nbytes:
            drv = driver.bindings()
            driver.call("cuMemcpyDtoH", drv.cuMemcpyDtoH(host, self.ptr, self.nbytes))
        return host

    def copy_from_numpy(self, array: np.ndarray) -> None:
        """Overwrite the contents with a host array of exactly `nbytes` bytes."""
        self._check_live()
        array = np.ascontiguousarray(array)
        if array.nbytes != self.nbytes:
            raise ValueError(f"the host array has {array.nbytes} bytes, the device array "
                             f"{self.nbytes}")
        if self.nbytes:
            drv = driver.bindings()
            driver.call("cuMemcpyHtoD", drv.cuMemcpyHtoD(self.ptr, array, self.nbytes))

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def storage_code(self) -> str:
        """The element-type code of the storage (`buffers`' codes: 'f4', 'u1', ...)."""
        h = host_dtype(self.dtype)
        return f"{h.kind}{h.itemsize}"

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        self._check_live()
        h = host_dtype(self.dtype)
        shape = (self.nbytes,) if self.dtype.bits < 8 else self.shape
        return {"shape": shape, "typestr": h.str, "data": (self.ptr, False),
                "strides": None, "version": 3}

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self) -> str:
        state = "" if self.ptr or not self.nbytes else ", freed"
        return (f"DeviceArray({self.dtype}{list(self.shape)}, {self.nbytes} bytes at "
                f"{self.ptr:#x} on cuda:{self.device_id}{state})")

    # ---- lifetime ------------------------------------------------------------------------------
    def _check_live(self) -> None:
        if self.nbytes and not self.ptr:
            raise ValueError("the DeviceArray was freed")

    def free(self) -> None:
        """Release the memory now (later use is an error)."""
        ptr, self.ptr = self.ptr, 0
        if ptr:
            drv = driver.bindings()
            driver.ensure_context()
            driver.call("cuMemFree", drv.cuMemFree(ptr))

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown, driver gone, ...
            self.free()
