"""The GPU runtime: load PTX with the CUDA driver (cuda-python) and launch kernels.

    from tilevm.backend.analysis.signature import signature_from_program
    from tilevm.backend.cuda import load_module
    module = load_module(ptx_text)
    kernel = module.get_function("vector_add", signature_from_program(program))
    kernel.launch(grid=(8,), block=(128,), shared_bytes=0, args=[x, y, out, n])

One concept a module:
- `errors`: the argument errors (`VMError`s) and the driver's (`CudaError`);
- `driver`: cuda-python's bindings (imported on first use), the calling thread's
  context (`ensure_context`; PyTorch's current context is used as it is), device facts;
- `buffers`: describing a device array from any producer (torch, `DeviceArray`,
  `__cuda_array_interface__`, DLPack), no driver needed;
- `validate`: binding arguments to a kernel's `Signature` and checking them, before
  anything is launched (no GPU needed), and the launch grid they give;
- `params`: packing arguments into `cuLaunchKernel`'s parameter array;
- `tensor_maps`: encoding TMA tensor maps for a launch;
- `streams`: the stream a launch goes on (None: PyTorch's current stream, else 0);
- `module`: loading PTX into the context (`load_module`, `load_artifact`);
- `kernel`: `Kernel`, its general launch path and the PyTorch fast path;
- `device_array`: `DeviceArray`, a small contiguous device buffer of tilevm elements.
"""

from tilevm.backend.cuda.buffers import BufferInfo, describe_buffer
from tilevm.backend.cuda.driver import Context, device_arch, ensure_context
from tilevm.backend.cuda.errors import (
    ArgumentTypeError,
    ArgumentValueError,
    CudaError,
    ModuleLoadError,
    NoDriverError,
)
from tilevm.backend.cuda.kernel import Kernel
from tilevm.backend.cuda.module import Module, load_artifact, load_module
from tilevm.backend.cuda.streams import resolve_stream
from tilevm.backend.cuda.validate import BoundPointer, BoundScalar, validate_args

__all__ = [
    "ArgumentTypeError", "ArgumentValueError", "CudaError", "NoDriverError", "ModuleLoadError",
    "BoundPointer", "BoundScalar", "validate_args", "describe_buffer", "BufferInfo",
    "Context", "ensure_context", "device_arch", "load_module", "load_artifact",
    "Module", "Kernel", "resolve_stream",
]
