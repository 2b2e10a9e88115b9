"""A prepared launch: a kernel's launch with everything fixed but its pointers and stream.

    prepared = kernel.prepare(x, y, out, n)      # checked as a call is, once
    prepared.launch(stream, x2.data_ptr(), y2.data_ptr(), out2.data_ptr())

`Kernel.prepare` checks its arguments as a call does (`validate_args`, the grid, the block
size, the shared memory, the pointers' devices) and builds this: the function handle,
grid, block, shared bytes, and the parameter buffer with the scalars packed. `launch`
writes new addresses into the pointer slots and issues one `cuLaunchKernel` (with the
programmatic-stream-serialization attribute, through `cuLaunchKernelEx`, for a kernel that
opts into dependent launch) on a raw stream handle. It checks nothing but the alignment
the kernel assumes: the caller vouches that each address is a buffer like the one given
to `prepare` (device, element type, at least as many bytes, contiguous). The library's
calls (`kernels.matmul`) and `Kernel.__call__`'s torch path key their prepared launches
by exactly those facts.

A launch writes the shared buffer and hands the driver its address; the driver copies
the values during the call, so a lock makes concurrent launches of one prepared launch
safe and costs far less than the driver call.
"""

from __future__ import annotations

import ctypes
import dataclasses
import struct
import threading
from collections.abc import Sequence
from typing import Any

from tilevm.backend.analysis.signature import Signature
from tilevm.backend.cuda import driver
from tilevm.backend.cuda.errors import ArgumentValueError
from tilevm.backend.cuda.params import scalar_slot
from tilevm.backend.cuda.tensor_maps import encode_tensor_maps
from tilevm.backend.cuda.validate import BoundPointer, BoundScalar

__all__ = ["PreparedLaunch"]

_MAPS_KEPT = 16  # tensor maps of this many pointer combinations are kept (TMA kernels)


class PreparedLaunch:
    """One kernel's launch with fixed grid, block, shared bytes and scalar arguments
    (module docstring). `pointer_params` names the pointer parameters in the order
    `launch` takes their addresses; `alignments` is what each must be a multiple of."""

    def __init__(self, function: Any, name: str, signature: Signature,
                 bound: Sequence[BoundPointer | BoundScalar], grid: tuple[int, int, int],
                 block: tuple[int, int, int], shared_bytes: int, *,
                 dependent: bool = False) -> None:
        self.name = name
        self.function = function
        self.grid = grid
        self.block = block
        self.shared_bytes = shared_bytes
        self.dependent = dependent
        self.empty = 0 in grid  # nothing to run (e.g. a ragged problem of size 0)
        self._signature = signature
        self._bound = tuple(bound)
        n = len(bound)
        self._slots = (ctypes.c_uint64 * max(n, 1))()
        for i, b in enumerate(bound):
            if isinstance(b, BoundScalar):
                code, convert = scalar_slot(b.param.dtype)
                struct.pack_into("=" + code, self._slots, 8 * i, convert(b.value))
            else:
                self._slots[i] = b.address
        self._pointer_slots = tuple(i for i, b in enumerate(bound)
                                    if isinstance(b, BoundPointer))
        self.pointer_params = tuple(bound[i].param.name for i in self._pointer_slots)
        self.alignments = tuple(bound[i].param.required_align for i in self._pointer_slots)
        base = ctypes.addressof(self._slots)
        self._slot_addresses = [base + 8 * i for i in range(n)]
        self._tensor_maps = bool(signature.tensor_maps)
        self._maps: dict[tuple[int, ...], tuple[Any, Any]] = {}
        self._params = self._params_for(tuple(bound[i].address for i in self._pointer_slots))
        self._lock = threading.Lock()
        self._drv = driver.bindings()
        self._success = self._drv.CUresult.CUDA_SUCCESS
        # One `pack_into` writes every pointer slot and skips the scalars' (pad bytes)
        last = self._pointer_slots[-1] + 1 if self._pointer_slots else 0
        self._pointer_writer = struct.Struct("=" + "".join(
            "Q" if i in self._pointer_slots else "8x" for i in range(last)))
        self._launch_head = (function, *grid, *block, shared_bytes)
        self._configs: dict[int, Any] = {}  # cuLaunchKernelEx's config, per stream

    def _params_for(self, pointers: tuple[int, ...]) -> tuple[int, Any]:
        """The `kernelParams` address (and what keeps it alive) for these pointers: the
        slots, then the tensor maps encoded for these addresses (TMA kernels)."""
        if not self._tensor_maps:
            if not self._slot_addresses:
                return 0, None
            array = (ctypes.c_void_p * len(self._slot_addresses))(*self._slot_addresses)
            return ctypes.addressof(array), array
        found = self._maps.get(pointers)
        if found is None:
            bound = list(self._bound)
            for slot, address in zip(self._pointer_slots, pointers):
                b = bound[slot]
                assert isinstance(b, BoundPointer)
                bound[slot] = BoundPointer(b.param, dataclasses.replace(b.buffer, address=address))
            maps = encode_tensor_maps(self._signature, bound)
            array = (ctypes.c_void_p * (len(bound) + len(maps)))(
                *self._slot_addresses, *[m.getPtr() for m in maps])
            if len(self._maps) >= _MAPS_KEPT:
                self._maps.clear()
            found = self._maps[pointers] = (ctypes.addressof(array), (array, maps))
        return found

    def launch(self, stream: int, *pointers: int) -> None:
        """Launch on `stream` (a raw `CUstream` handle, 0 for the default stream) with
        these addresses for `pointer_params`, in order (module docstring)."""
        if len(pointers) != len(self.alignments):
            raise TypeError(f"kernel {self.name}: launch takes {len(self.alignments)} "
                            f"addresses ({', '.join(self.pointer_params)}), got {len(pointers)}")
        for address, align in zip(pointers, self.alignments):
            if address % align:
                self._misaligned(pointers)
        self.submit(stream, pointers)

    def submit(self, stream: int, pointers: Sequence[int]) -> None:
        """`launch` for addresses known to be aligned (`alignments`)."""
        if self.empty:
            return
        with self._lock:
            self._pointer_writer.pack_into(self._slots, 0, *pointers)
            params = self._params_for(tuple(pointers))[0] if self._tensor_maps \
                else self._params[0]
            if self.dependent:
                result = self._drv.cuLaunchKernelEx(self._config(stream), self.function,
                                                    params, 0)
            else:
                result = self._drv.cuLaunchKernel(*self._launch_head, stream, params, 0)
        if result[0] != self._success:
            driver.call(f"cuLaunchKernel({self.name})", result)

    def _config(self, stream: int) -> Any:
        """The `CUlaunchConfig` of a dependent launch on `stream`: this grid, block and
        shared memory, and programmatic stream serialization allowed (the kernel may
        start before the previous one in the stream ends; it waits in the code)."""
        config = self._configs.get(stream)
        if config is None:
            drv = self._drv
            attr = drv.CUlaunchAttribute()
            attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            config = drv.CUlaunchConfig()
            config.gridDimX, config.gridDimY, config.gridDimZ = self.grid
            config.blockDimX, config.blockDimY, config.blockDimZ = self.block
            config.sharedMemBytes = self.shared_bytes
            config.hStream = stream
            config.attrs = [attr]
            config.numAttrs = 1
            if len(self._configs) >= 64:
                self._configs.clear()
            self._configs[stream] = config
        return config

    def _misaligned(self, pointers: Sequence[int]) -> None:
        for name, address, align in zip(self.pointer_params, pointers, self.alignments):
            if address % align:
                raise ArgumentValueError(
                    f"kernel {self.name}: argument {name}: address {address:#x} is not "
                    f"{align}-byte aligned, as the compiled code assumes")
