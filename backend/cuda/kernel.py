"""A loaded kernel and its launch: validation, parameters, shared memory, stream, driver.

    kernel = module.get_function("vector_add", signature)
    kernel(x, y, out, n)                                  # the signature's grid and block
    kernel.launch(grid=(8,), block=(128,), shared_bytes=0, args=[x, y, out, n])

`Kernel.__call__` with PyTorch CUDA tensors and Python scalars of sizes it has launched
with before makes the general path's checks on a fast path (`_TorchFastPath`, a fraction
of the general path's host time), and leaves anything else, and every error, to the
general path: `validate_args`, then `Kernel._launch_bound`.
"""

from __future__ import annotations

import ctypes
import math
import struct
import sys
import threading
from collections.abc import Sequence
from typing import Any

from tilevm.backend.analysis.signature import Signature
from tilevm.backend.cuda import driver
from tilevm.backend.cuda.buffers import TORCH_DTYPES, code_itemsize
from tilevm.backend.cuda.driver import Context
from tilevm.backend.cuda.errors import ArgumentTypeError, ArgumentValueError, CudaError
from tilevm.backend.cuda.params import LaunchParams, pack_bound, pack_raw, scalar_slot
from tilevm.backend.cuda.streams import resolve_stream
from tilevm.backend.cuda.tensor_maps import encode_tensor_maps
from tilevm.backend.cuda.validate import (
    MAX_GRID,
    BoundPointer,
    BoundScalar,
    accepted_codes,
    grid_of,
    int_range,
    validate_args,
)
from tilevm.ir.errors import VMError

__all__ = ["Kernel", "MAX_STATIC_SHARED"]

MAX_STATIC_SHARED = 48 * 1024  # above this a kernel must opt in to dynamic shared memory


def _dim3(value: int | Sequence[int], what: str) -> tuple[int, int, int]:
    dims = [value] if isinstance(value, int) else list(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and not isinstance(d, bool)
                                           for d in dims):
        raise ArgumentTypeError(f"{what} must be 1 to 3 ints, got {value!r}")
    if any(d < 0 for d in dims):
        raise ArgumentValueError(f"{what} {tuple(dims)} has a negative dimension")
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


class _TorchFastPath:
    """The launch path of `Kernel.__call__` for its common case: every pointer argument a
    PyTorch CUDA tensor, every scalar a Python int (or float, for a float parameter),
    argument sizes seen before. `launch` either launches, having checked everything
    `validate_args` and `Kernel._launch_packed` check, or declines (returns False) before
    touching the driver, and the caller takes the general path, which then accepts or
    raises its usual error. It never raises for a bad argument itself, so every message
    stays the general path's, and it accepts nothing the general path would reject:

    - a pointer: `isinstance(a, torch.Tensor)`, `a.is_cuda` on the kernel's device
      (`get_device()`), a torch dtype the parameter accepts (a set computed once from
      `accepted_codes`), `is_contiguous()`, `data_ptr()` aligned (`required_align`);
      torch tensors are never read-only;
    - a scalar: `type(a) is int` within the type's range, or for a float parameter an
      int or float that is finite and within the largest finite value;
    - the size checks (assumptions, views against buffer sizes) already passed for
      these scalar values and buffer sizes (`Kernel._checked`), and a general launch of
      these scalar values succeeded, which checked and remembered the grid (`_grids`),
      the block size against the kernel's limit and the shared memory;
    - the calling thread's current context is the module's (`cuCtxGetCurrent` only).

    What does not depend on the arguments is computed here once. The parameter values
    go into a per-thread buffer (`struct.pack_into`, one 8-byte slot each) whose slot
    addresses form the `kernelParams` array; the driver copies them during
    `cuLaunchKernel`, so the buffer is reused."""

    def __init__(self, kernel: Kernel, torch: Any) -> None:
        sig = kernel.signature
        assert sig is not None
        self.kernel = kernel
        self.tensor = torch.Tensor
        self.cuda_initialized = torch.cuda.is_initialized
        # PyTorch's current stream, as `torch_current_stream` reads it
        self.raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self.current_device = getattr(torch._C, "_cuda_getDevice", None)
        if self.current_device is None:
            self.raw_stream = None
        self.drv = driver.bindings()
        self.success = self.drv.CUresult.CUDA_SUCCESS
        self.function = kernel.handle
        self.block = (kernel.num_threads, 1, 1)
        self.shared_bytes = kernel.shared_bytes
        self.context = int(kernel.module.context.handle)
        self.device = kernel.module.context.device
        # per parameter: ("p", {accepted torch dtype: itemsize}, alignment),
        # ("i", smallest, largest) or ("f", largest finite value, packer)
        self.params: list[tuple[Any, ...]] = []
        fmt = "="
        for p in sig.params:
            if p.is_pointer:
                codes = accepted_codes(p.dtype)
                dtypes = {getattr(torch, name): code_itemsize(code)
                          for name, code in TORCH_DTYPES.items()
                          if code in codes and hasattr(torch, name)}
                self.params.append(("p", dtypes, p.required_align))
                fmt += "Q"
            else:
                code, convert = scalar_slot(p.dtype)
                fmt += code + ("4x" if code in "fiI" else "")  # 8-byte slots
                if p.dtype.is_float:
                    self.params.append(("f", p.dtype.max, convert))
                else:
                    self.params.append(("i", *int_range(p.dtype)))
        self.format = fmt
        self.nparams = len(sig.params)
        self.tensor_maps = bool(sig.tensor_maps)  # then the general path encoded them first
        self._local = threading.local()

    def _buffer(self) -> tuple[Any, int]:
        """This thread's parameter buffer and the address of its `kernelParams` array."""
        try:
            return self._local.buffer
        except AttributeError:
            n = self.nparams
            data = ctypes.create_string_buffer(8 * max(n, 1))
            base = ctypes.addressof(data)
            array = (ctypes.c_void_p * max(n, 1))(*[base + 8 * i for i in range(n)])
            self._local.keep = (data, array)
            self._local.buffer = (data, ctypes.addressof(array) if n else 0)
            return self._local.buffer

    def launch(self, args: tuple[Any, ...], stream: Any) -> bool:
        if len(args) != self.nparams:
            return False
        tensor = self.tensor
        device = self.device
        values: list[Any] = []
        scalars: list[Any] = []
        key: list[Any] = []  # as validate_args' `checked` key: scalar values, buffer sizes
        bound: list[Any] = []  # addresses and scalars: the key of encoded tensor maps
        try:
            for a, (kind, x, y) in zip(args, self.params):
                if kind == "p":
                    if not isinstance(a, tensor) or not a.is_cuda or a.get_device() != device:
                        return False
                    itemsize = x.get(a.dtype)
                    if itemsize is None or not a.is_contiguous():
                        return False
                    address = a.data_ptr()
                    if address % y:
                        return False
                    values.append(address)
                    bound.append(address)
                    key.append(a.numel() * itemsize)
                elif kind == "i":
                    if type(a) is not int or not x <= a <= y:
                        return False
                    values.append(a)
                    scalars.append(a)
                    bound.append(a)
                    key.append(a)
                else:
                    if type(a) is not int and type(a) is not float:
                        return False
                    v = float(a)
                    if not math.isfinite(v) or abs(v) > x:
                        return False
                    values.append(y(v))
                    scalars.append(v)
                    bound.append(v)
                    key.append(v)
        except Exception:  # an odd tensor (sparse, ...): the general path says what
            return False
        kernel = self.kernel
        if tuple(key) not in kernel._checked:
            return False
        grid = kernel._grids.get(tuple(scalars))
        if grid is None:
            return False
        maps = kernel._maps.get(tuple(bound)) if self.tensor_maps else None
        if self.tensor_maps and maps is None:
            return False  # the general path encodes them (and checks the views)
        drv = self.drv
        _, ctx = drv.cuCtxGetCurrent()
        if ctx is None or int(ctx) != self.context:
            return False  # no context or another one: the general path decides
        handle = None
        if stream is None and self.raw_stream is not None:  # resolve_stream(None), cached
            try:
                if self.cuda_initialized():
                    handle = int(self.raw_stream(self.current_device()))
            except Exception:
                handle = None
        if handle is None:
            handle = resolve_stream(stream)
        data, params = self._buffer()
        struct.pack_into(self.format, data, 0, *values)
        if maps is not None:  # the tensor maps' own 128-byte values after the slots
            base = ctypes.addressof(data)
            array = (ctypes.c_void_p * (self.nparams + len(maps)))(
                *[base + 8 * i for i in range(self.nparams)], *[m.getPtr() for m in maps])
            params = ctypes.addressof(array)
        result = drv.cuLaunchKernel(self.function, *grid, *self.block, self.shared_bytes,
                                    handle, params, 0)
        if result[0] != self.success:
            driver.call(f"cuLaunchKernel({kernel.name})", result)
        return True


class Kernel:
    """A kernel function of a loaded module (`module`: the `Module` it was found in, whose
    `context` it runs in; `module.Module.get_function` makes kernels)."""

    def __init__(self, module: Any, handle: Any, name: str,
                 signature: Signature | None = None, *, num_threads: int | None = None,
                 shared_bytes: int = 0) -> None:
        self.module = module
        self.handle = handle
        self.name = name
        self.signature = signature
        self.num_threads = num_threads or (signature.num_threads if signature else 0)
        self.shared_bytes = shared_bytes
        self._dynamic_limit = MAX_STATIC_SHARED
        self._max_threads: int | None = None
        self._checked: set[tuple[Any, ...]] = set()  # size checks passed (validate_args)
        # grids of launches that went through, by scalar arguments (`_TorchFastPath` too)
        self._grids: dict[tuple[Any, ...], tuple[int, int, int]] = {}
        self._maps: dict[tuple[Any, ...], list[Any]] = {}  # encoded tensor maps (TMA)
        self._fast: _TorchFastPath | None = None  # built once PyTorch is imported

    def attribute(self, name: str) -> int:
        """A `CU_FUNC_ATTRIBUTE_...` of the loaded function."""
        drv = driver.bindings()
        attr = getattr(drv.CUfunction_attribute, name)
        return int(driver.call(f"cuFuncGetAttribute({name})",
                               drv.cuFuncGetAttribute(attr, self.handle)))

    def __call__(self, *args: Any, grid: int | Sequence[int] | None = None,
                 stream: Any = None) -> None:
        """Launch with the signature's grid and block size and the module's shared bytes.

        Torch tensors and Python scalars of sizes launched before take `_TorchFastPath`
        (the same checks, in a fraction of the host time); anything else, or anything it
        declines, the general path: `validate_args`, then `_launch_bound`."""
        fast = self._fast
        if fast is None and self.signature is not None and self.num_threads:
            torch = sys.modules.get("torch")
            if torch is not None and self.module is not None:
                fast = self._fast = _TorchFastPath(self, torch)
        if grid is None and fast is not None and fast.launch(args, stream):
            return  # torch tensors and sizes seen before (see _TorchFastPath)
        if self.signature is None:
            raise VMError(f"kernel {self.name} has no signature: use launch(grid, block, ...)")
        if not self.num_threads:
            raise VMError(f"kernel {self.name}: unknown block size: use launch(...)")
        bound = validate_args(self.signature, args, self._checked)
        key = None
        if grid is None:
            key = tuple(b.value for b in bound if isinstance(b, BoundScalar))
            grid = self._grids.get(key) or grid_of(self.signature, bound)
        self._launch_bound(grid, (self.num_threads,), self.shared_bytes, bound, stream)
        if key is not None and 0 not in grid:
            self._grids[key] = grid  # launched: the grid, block and shared memory are fine

    def launch(self, grid: int | Sequence[int], block: int | Sequence[int], shared_bytes: int,
               args: Sequence[Any], stream: Any = None) -> None:
        """Validate `args` (against the signature, if any), then launch on `stream`."""
        _dim3(grid, "grid")  # bad launch dimensions are reported before the arguments
        _dim3(block, "block")
        if not isinstance(shared_bytes, int) or shared_bytes < 0:
            raise ArgumentValueError(f"shared_bytes must be a non-negative int, got "
                                     f"{shared_bytes!r}")
        if self.signature is not None:
            self._launch_bound(grid, block, shared_bytes,
                               validate_args(self.signature, args, self._checked), stream)
        else:
            self._launch_packed(grid, block, shared_bytes, pack_raw(args), [], stream)

    def _launch_bound(self, grid: int | Sequence[int], block: int | Sequence[int],
                      shared_bytes: int, bound: Sequence[BoundPointer | BoundScalar],
                      stream: Any) -> None:
        params = pack_bound(bound)
        if self.signature is not None and self.signature.tensor_maps:
            # Encoded once per (addresses, scalars): a driver call per map otherwise
            key = tuple(b.address if isinstance(b, BoundPointer) else b.value for b in bound)
            maps = self._maps.get(key)
            if maps is None:
                if len(self._maps) >= 64:
                    self._maps.clear()
                maps = self._maps[key] = encode_tensor_maps(self.signature, bound)
            params.values.extend(maps)  # kept alive until the launch has copied them
            addresses = [ctypes.addressof(v) for v in params.values[:len(bound)]]
            addresses += [m.getPtr() for m in maps]
            params.array = (ctypes.c_void_p * len(addresses))(*addresses)
        self._launch_packed(grid, block, shared_bytes, params,
                            [b for b in bound if isinstance(b, BoundPointer)], stream)

    def _launch_packed(self, grid: int | Sequence[int], block: int | Sequence[int],
                       shared_bytes: int, params: LaunchParams,
                       pointers: Sequence[BoundPointer], stream: Any) -> None:
        grid3 = _dim3(grid, "grid")
        block3 = _dim3(block, "block")
        for axis, (n, most) in enumerate(zip(grid3, MAX_GRID)):
            if n > most:
                raise ArgumentValueError(f"grid dimension {axis} is {n}, more than {most}")
        threads = math.prod(block3)
        if threads == 0 or threads > 1024:
            raise ArgumentValueError(f"block {block3} has {threads} threads (1 to 1024)")
        handle = resolve_stream(stream)
        ctx = driver.ensure_context()
        if ctx.handle != self.module.context.handle and int(ctx.handle) != int(
                self.module.context.handle):
            raise CudaError(f"kernel {self.name} was loaded in another CUDA context "
                            f"(device {self.module.context.device}); the current one is on "
                            f"device {ctx.device}")
        self._check_pointers(pointers, ctx)
        if self._max_threads is None:
            self._max_threads = self.attribute("CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK")
        max_threads = self._max_threads
        if threads > max_threads:
            raise ArgumentValueError(f"kernel {self.name} can run at most {max_threads} threads "
                                     f"per block (registers), asked for {threads}")
        self._set_shared(shared_bytes, ctx)
        if 0 in grid3:
            return  # nothing to run (e.g. a ragged problem of size 0)
        drv = driver.bindings()
        driver.call(f"cuLaunchKernel({self.name})", drv.cuLaunchKernel(
            self.handle, *grid3, *block3, shared_bytes, handle, params.address, 0))

    def _set_shared(self, shared_bytes: int, ctx: Context) -> None:
        if shared_bytes <= self._dynamic_limit:
            return
        static = self.attribute("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES")
        optin = driver.device_attribute("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
                                        ctx.device)
        if static + shared_bytes > optin:
            raise ArgumentValueError(
                f"kernel {self.name}: {shared_bytes} bytes of dynamic shared memory plus "
                f"{static} static exceed the device's {optin} bytes per block")
        drv = driver.bindings()
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        driver.call("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                    drv.cuFuncSetAttribute(self.handle, attr, shared_bytes))
        self._dynamic_limit = shared_bytes

    def _check_pointers(self, pointers: Sequence[BoundPointer], ctx: Context) -> None:
        """Each pointer is device memory of the context's device (the driver knows)."""
        drv = driver.bindings()
        sig_name = self.signature.name if self.signature else self.name
        for b in pointers:
            if b.buffer.nbytes == 0:
                continue
            device = b.buffer.device_id
            if device is None:
                attr = drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
                err, value = drv.cuPointerGetAttribute(attr, b.address)
                if err != drv.CUresult.CUDA_SUCCESS:
                    raise ArgumentTypeError(
                        f"kernel {sig_name}: argument {b.param} at {b.address:#x} is not CUDA "
                        f"device memory ({driver.error_name(drv, err)})")
                device = int(value)
            if device != ctx.device:
                raise ArgumentTypeError(
                    f"kernel {sig_name}: argument {b.param} is on cuda:{device}, but the kernel "
                    f"runs on cuda:{ctx.device}")
