"""Packing launch arguments into the `kernelParams` array that `cuLaunchKernel` takes.

Pointers are passed as 64-bit addresses; integer scalars of up to 32 bits as 32-bit
values (sign- or zero-extended), 64-bit ones as 64-bit values; f32 as a float; f16/bf16
and narrower float types as their code zero-extended to 32 bits. (The driver copies as
many bytes as the PTX parameter declares, little-endian, so a `.u8`, `.b16` or `.u32`
parameter reads the right value either way.)
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilevm.backend.cuda.buffers import describe_buffer
from tilevm.backend.cuda.errors import ArgumentTypeError
from tilevm.backend.cuda.validate import BoundPointer, BoundScalar
from tilevm.dtypes import DataType, encode

__all__ = ["scalar_slot", "pack_scalar", "LaunchParams", "pack_bound", "pack_raw"]


def scalar_slot(dtype: DataType) -> tuple[str, Any]:
    """How a scalar parameter of `dtype` is passed (module docstring): the `struct` code
    of its 4- or 8-byte slot, and the function giving the slot's value: f32 as a float,
    16-bit and narrower floats as their code in a 32-bit integer, integers as 32-bit or
    (wider types) 64-bit integers."""
    if dtype.name == "f32":
        return "f", float
    if dtype.is_float:
        return "I", lambda value: int(encode([float(value)], dtype)[0])
    if dtype.bits <= 32:
        return ("i" if dtype.is_signed else "I"), int
    return ("q" if dtype.is_signed else "Q"), int


_SLOT_CTYPES = {"f": ctypes.c_float, "i": ctypes.c_int32, "I": ctypes.c_uint32,
                "q": ctypes.c_int64, "Q": ctypes.c_uint64}


def pack_scalar(dtype: DataType, value: int | float) -> ctypes._SimpleCData:
    """The ctypes value a scalar parameter of `dtype` is passed as (`scalar_slot`)."""
    code, convert = scalar_slot(dtype)
    return _SLOT_CTYPES[code](convert(value))


@dataclass
class LaunchParams:
    """The values of a launch's parameters and the `kernelParams` array of their addresses
    (kept alive together until the driver has copied them)."""

    values: list[Any] = field(default_factory=list)
    array: Any = None

    @property
    def address(self) -> int:
        return ctypes.addressof(self.array) if self.array is not None else 0



def pack_bound(bound: Sequence[BoundPointer | BoundScalar]) -> LaunchParams:
    """The parameters of validated arguments: addresses as 64-bit values, scalars as
    `pack_scalar` gives them."""
    values: list[Any] = []
    for b in bound:
        if isinstance(b, BoundPointer):
            values.append(ctypes.c_uint64(b.address))
        else:
            values.append(pack_scalar(b.param.dtype, b.value))
    lp = LaunchParams(values)
    if values:
        lp.array = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
    return lp


def pack_raw(args: Sequence[Any]) -> LaunchParams:
    """Arguments of a kernel without a signature: arrays (as 64-bit addresses), numpy
    scalars or ctypes values (as their own type). Python numbers are ambiguous."""
    bound: list[Any] = []
    for i, a in enumerate(args):
        if isinstance(a, ctypes._SimpleCData):
            bound.append(a)
        elif isinstance(a, np.generic):
            ctype = np.ctypeslib.as_ctypes_type(a.dtype)
            bound.append(ctype(a.item()))
        else:
            info = describe_buffer(a) if not isinstance(a, (int, float)) else None
            if info is None:
                raise ArgumentTypeError(
                    f"argument {i}: a kernel launched without a signature takes device arrays, "
                    f"numpy scalars (np.int32(n)) or ctypes values, got {type(a).__name__}")
            if info.device not in ("cuda", "cuda_managed"):
                raise ArgumentTypeError(f"argument {i} is on the {info.device} device; it "
                                        f"must be a CUDA array")
            bound.append(ctypes.c_uint64(info.address))
    lp = LaunchParams(bound)
    if bound:
        lp.array = (ctypes.c_void_p * len(bound))(*[ctypes.addressof(v) for v in bound])
    return lp
