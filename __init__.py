"""tilevm: a low-precision GPU virtual machine and compiler.

    import tilevm as tv

    @tv.kernel(num_warps=4)
    def vector_add(x: tv.ptr("f32", const=True), y: tv.ptr("f32", const=True),
                   out: tv.ptr("f32"), n: tv.int32, *, block: int = 1024):
        ...

The kernel language (`tv.kernel`, `tv.load_global`, `tv.dot`, the data types, ...) is
`tilevm.vm.lang`; `tilevm.dtypes` and `tilevm.layouts` are the data types and the
layout algebra.
"""

from tilevm import dtypes, layouts
from tilevm.backend.launch import compiled_kernel
from tilevm.vm.frontend import Kernel
from tilevm.vm.lang import *  # noqa: F403  the kernel language is the top-level API
from tilevm.vm.lang import __all__ as _lang_names
from tilevm.vm.lang import __getattr__ as _dtype_by_name

__version__ = "0.1.0"

# `from tilevm import *` leaves Python's builtins alone; `tv.range`, `tv.sum`, ... stay.
_SHADOWING = {"range", "sum", "max", "min", "print", "abs", "compile"}


def compile(kernel: Kernel, *, arch: str | None = None, **constants):
    """Compile `kernel` with its compile-time `constants` for the current GPU (or `arch`)
    and return the loaded kernel: call it with the runtime arguments (PyTorch or CuPy
    tensors, anything with `__cuda_array_interface__` or DLPack, `DeviceArray`s, Python
    scalars) to launch it on the current stream, after the arguments are validated.

        add = tv.compile(vector_add, block=1024)
        add(x, y, out, n)            # torch tensors on the GPU

    Compiled PTX is cached on disk (`TILEVM_CACHE_DIR`, default ~/.cache/tilevm)."""
    return compiled_kernel(kernel.specialize(**constants), arch)
__all__ = ["dtypes", "layouts", "__version__",
           *[name for name in _lang_names if name not in _SHADOWING]]


def __getattr__(name: str):
    return _dtype_by_name(name)  # tv.f5e2m2 and every other type name
