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
import sys
from collections.abc import Sequence
from typing import Any

from tilevm.backend.analysis.signature import Signature
from tilevm.backend.cuda import driver
from tilevm.backend.cuda.driver import Context
from tilevm.backend.cuda.errors import ArgumentTypeError, ArgumentValueError, CudaError
from tilevm.backend.cuda.params import LaunchParams, pack_bound, pack_raw
from tilevm.backend.cuda.prepared import PreparedLaunch
from tilevm.backend.cuda.streams import resolve_stream
from tilevm.backend.cuda.tensor_maps import encode_tensor_maps
from tilevm.backend.cuda.validate import (
    MAX_GRID,
    BoundPointer,
    BoundScalar,
    grid_of,
    validate_args,
)
from tilevm.ir.errors import VMError

__all__ = ["Kernel", "MAX_STATIC_SHARED", "capped_shared_bytes"]

MAX_STATIC_SHARED = 48 * 1024  # above this a kernel must opt in to dynamic shared memory


def _dim3(value: int | Sequence[int], what: str) -> tuple[int, int, int]:
    dims = [value] if isinstance(value, int) else list(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and not isinstance(d, bool)
                                           for d in dims):
        raise ArgumentTypeError(f"{what} must be 1 to 3 ints, got {value!r}")
    if any(d < 0 for d in dims):
        raise ArgumentValueError(f"{what} {tuple(dims)} has a negative dimension")
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


def capped_shared_bytes(blocks: int, static: int, dynamic: int, per_sm: int,
                        reserved: int) -> int:
    """Dynamic shared bytes for a block that uses `static` + `dynamic` so that at most
    `blocks` of it fit on an SM of `per_sm` bytes, each also taking the driver's
    `reserved` bytes: `blocks + 1` of them must not fit (at least `dynamic`)."""
    if not isinstance(blocks, int) or isinstance(blocks, bool) or blocks < 1:
        raise ArgumentValueError(f"max_blocks_per_sm must be a positive int, got {blocks!r}")
    footprint = per_sm // (blocks + 1) + 1  # blocks + 1 of these exceed the SM
    return max(dynamic, footprint - static - reserved)


class _TorchFastPath:
    """The launch path of `Kernel.__call__` for its common case: every pointer argument a
    PyTorch tensor, every scalar a Python int (or float, for a float parameter). A call
    computes a key of what the checks depend on, per pointer its dtype, element count,
    device and contiguity, per scalar its value, and looks up the `PreparedLaunch` that
    `Kernel.prepare` built the first time it met that key (after the general checks, which
    raise their usual errors word for word); then it reads the data pointers and launches.
    It declines (returns False) anything else: an argument of another kind, a wrong
    count, an explicit grid; the general path then accepts or raises as usual.

    What the general path checks per call and the key does not cover is checked here:
    the alignment of each address (misaligned: declined, so the general path names the
    argument), and the calling thread's current context (`cuCtxGetCurrent`: a launch in
    another context would fail)."""

    _KEPT = 1024  # prepared launches kept per kernel (a new scalar value is a new key)

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
        self.context = int(kernel.module.context.handle)
        # per parameter: None for a pointer, else the Python types a scalar may be
        self.params: list[tuple[type, ...] | None] = [
            None if p.is_pointer else (int, float) if p.dtype.is_float else (int,)
            for p in sig.params]
        self.nparams = len(sig.params)
        self.prepared: dict[tuple[Any, ...], PreparedLaunch] = {}

    def launch(self, args: tuple[Any, ...], stream: Any) -> bool:
        if len(args) != self.nparams:
            return False
        tensor = self.tensor
        key: list[Any] = []
        pointers: list[int] = []
        try:
            for a, types in zip(args, self.params):
                if types is None:
                    if not isinstance(a, tensor):
                        return False
                    key += (a.dtype, a.numel(), a.get_device(), a.is_contiguous())
                    pointers.append(a.data_ptr())
                elif type(a) in types:
                    key.append(a)
                else:
                    return False
        except Exception:  # an odd tensor (sparse, ...): the general path says what
            return False
        _, ctx = self.drv.cuCtxGetCurrent()
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
        sizes = tuple(key)
        prepared = self.prepared.get(sizes)
        if prepared is None:
            prepared = self.kernel.prepare(*args)  # the general checks; raises as a call
            if len(self.prepared) >= self._KEPT:
                self.prepared.clear()
            self.prepared[sizes] = prepared
        for address, align in zip(pointers, prepared.alignments):
            if address % align:
                return False  # the general path says which argument
        prepared.submit(handle, pointers)
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
        # whether prepared launches may overlap the previous kernel's tail: the program
        # waits for its prerequisites in its code (`tv.wait_prerequisites`)
        self.dependent_launch = bool(signature and signature.dependent_launch)
        # grids of the general path's launches that went through, by scalar arguments
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

        Torch tensors and Python scalars take `_TorchFastPath` (a `PreparedLaunch` per
        key of sizes, checked once with the general checks); anything else, or anything it
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
        grid3, block3 = self._check_launch(grid, block, shared_bytes, pointers)
        handle = resolve_stream(stream)
        if 0 in grid3:
            return  # nothing to run (e.g. a ragged problem of size 0)
        drv = driver.bindings()
        driver.call(f"cuLaunchKernel({self.name})", drv.cuLaunchKernel(
            self.handle, *grid3, *block3, shared_bytes, handle, params.address, 0))

    def _check_launch(self, grid: int | Sequence[int], block: int | Sequence[int],
                      shared_bytes: int, pointers: Sequence[BoundPointer]
                      ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """Everything a launch checks beyond its arguments: the grid and block within
        CUDA's and the kernel's limits, the current context the module's, the pointers on
        its device, the shared memory granted (`_set_shared`). Returns the grid and block."""
        grid3 = _dim3(grid, "grid")
        block3 = _dim3(block, "block")
        for axis, (n, most) in enumerate(zip(grid3, MAX_GRID)):
            if n > most:
                raise ArgumentValueError(f"grid dimension {axis} is {n}, more than {most}")
        threads = math.prod(block3)
        if threads == 0 or threads > 1024:
            raise ArgumentValueError(f"block {block3} has {threads} threads (1 to 1024)")
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
        return grid3, block3

    def prepare(self, *args: Any, grid: int | Sequence[int] | None = None,
                dependent: bool | None = None,
                max_blocks_per_sm: int | None = None) -> PreparedLaunch:
        """A `PreparedLaunch` of this kernel with these arguments (backend/cuda/prepared.py):
        checked as a call checks them, once; it then launches with new addresses for the
        pointer arguments and nothing else checked but their alignment. `dependent`
        (default: what the program declares) launches with programmatic stream
        serialization, for a kernel that waits for its prerequisites in its code.
        `max_blocks_per_sm`: at most that many of its blocks on one SM, by asking for more
        shared memory than it uses (`capped_shared_bytes`). A dependent launch's blocks
        take whatever SMs the previous kernel frees first, and may pile up on a few; a
        launch on an idle GPU spreads them by itself."""
        if self.signature is None:
            raise VMError(f"kernel {self.name} has no signature: use launch(grid, block, ...)")
        if not self.num_threads:
            raise VMError(f"kernel {self.name}: unknown block size: use launch(...)")
        bound = validate_args(self.signature, args, self._checked)
        if grid is None:
            grid = grid_of(self.signature, bound)
        pointers = [b for b in bound if isinstance(b, BoundPointer)]
        shared_bytes = self.shared_bytes
        if max_blocks_per_sm is not None:
            device = driver.ensure_context().device
            shared_bytes = capped_shared_bytes(
                max_blocks_per_sm, self.attribute("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"),
                shared_bytes, driver.device_attribute(
                    "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", device),
                driver.device_attribute(
                    "CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK", device))
        grid3, block3 = self._check_launch(grid, (self.num_threads,), shared_bytes,
                                           pointers)
        if dependent is None:
            dependent = self.dependent_launch
        return PreparedLaunch(self.handle, self.name, self.signature, bound, grid3, block3,
                              shared_bytes, dependent=dependent)

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
