"""The torch fast path of `Kernel.__call__` (backend/cuda/kernel.py, `_TorchFastPath`) and
the prepared launch it takes (backend/cuda/prepared.py).

CPU tests: a fake `torch` module (tensors that answer what the runtime asks of a torch
tensor) and a fake CUDA driver that records launches. The fast path must launch with
the same parameter values as the general path, and decline every argument the general
path rejects, so that the general path raises its usual error, word for word. GPU tests
(`gpu` marker): a compiled kernel called with real torch tensors.
"""

from __future__ import annotations

import ctypes
import sys
import types
from typing import Any

import numpy as np
import pytest
from kernel_harness import GOLDEN, cuda_torch

from tilevm.backend.analysis.signature import ParamSpec, Signature, signature_from_program
from tilevm.backend.cuda import driver
from tilevm.backend.cuda import kernel as kernel_module
from tilevm.backend.cuda.buffers import TORCH_DTYPES, code_itemsize
from tilevm.backend.cuda.errors import ArgumentTypeError, ArgumentValueError, CudaError
from tilevm.backend.cuda.kernel import Kernel
from tilevm.backend.cuda.module import Module
from tilevm.backend.cuda.validate import validate_args
from tilevm.dtypes import parse
from tilevm.ir import parse_program

# ---- a fake torch and a fake driver ------------------------------------------------------------

class FakeDtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"


class FakeDevice:
    def __init__(self, type: str, index: int | None) -> None:
        self.type = type
        self.index = index


def make_fake_torch() -> types.ModuleType:
    torch = types.ModuleType("torch")
    for name in TORCH_DTYPES:
        setattr(torch, name, FakeDtype(name))
    torch.complex64 = FakeDtype("complex64")

    class Tensor:
        """A 1-d tensor: `n` elements of `dtype` at `ptr` (`stride` elements apart)."""

        def __init__(self, n: int, dtype: str = "float16", ptr: int = 0x7F0000000000,
                     device: str = "cuda", index: int | None = 0, stride: int = 1) -> None:
            self.n = n
            self.dtype = getattr(torch, dtype)
            self.ptr = ptr
            self.device = FakeDevice(device, index if device == "cuda" else None)
            self.stride = stride

        def data_ptr(self) -> int:
            return self.ptr

        def numel(self) -> int:
            return self.n

        def element_size(self) -> int:
            name = self.dtype.name
            return 8 if name == "complex64" else code_itemsize(TORCH_DTYPES[name])

        def is_contiguous(self) -> bool:
            return self.stride == 1 or self.n <= 1

        @property
        def is_cuda(self) -> bool:
            return self.device.type == "cuda"

        def get_device(self) -> int:
            return self.device.index if self.is_cuda else -1

    torch.Tensor = Tensor
    torch.cuda = types.SimpleNamespace(is_initialized=lambda: False)
    torch._C = types.SimpleNamespace()
    return torch


class FakeDriver:
    """What the runtime calls of cuda-python, recording each launch's parameters."""

    CONTEXT = 0xC0

    class CUresult:
        CUDA_SUCCESS = 0

    class CUfunction_attribute:
        CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = "max_threads"

    def __init__(self, signature: Signature) -> None:
        self.signature = signature
        self.launches: list[tuple[Any, ...]] = []
        self.current = self.CONTEXT

    def cuInit(self, flags: int):
        return (0,)

    def cuDeviceGetCount(self):
        return (0, 1)

    def cuCtxGetCurrent(self):
        return (0, self.current)

    def cuCtxGetDevice(self):
        return (0, 0)

    def cuFuncGetAttribute(self, attr: Any, fn: Any):
        return (0, 1024)

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        slots = (ctypes.c_void_p * len(self.signature.params)).from_address(params)
        values = [_read_slot(p, slots[i]) for i, p in enumerate(self.signature.params)]
        self.launches.append(((gx, gy, gz), (bx, by, bz), shared, int(stream), values))
        return (0,)


def _read_slot(p: ParamSpec, address: int) -> int | float:
    """A parameter's value as the driver reads it (as many bytes as the PTX declares)."""
    if p.is_pointer:
        return ctypes.c_uint64.from_address(address).value
    if p.dtype.name == "f32":
        return ctypes.c_float.from_address(address).value
    if p.dtype.is_float or p.dtype.bits <= 32:
        ctype = ctypes.c_int32 if p.dtype.is_signed and not p.dtype.is_float else ctypes.c_uint32
        return ctype.from_address(address).value
    return (ctypes.c_int64 if p.dtype.is_signed else ctypes.c_uint64).from_address(address).value


@pytest.fixture
def torch(monkeypatch):
    fake = make_fake_torch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    return fake


def make_kernel(monkeypatch, sig: Signature) -> tuple[Kernel, FakeDriver]:
    drv = FakeDriver(sig)
    monkeypatch.setattr(driver, "bindings", lambda: drv)
    monkeypatch.setattr(driver, "_initialised", False)
    module = Module(handle=1, context=driver.Context(FakeDriver.CONTEXT, 0), ptx="")
    kernel = Kernel(module, handle=0xF00, name=sig.name, signature=sig,
                    num_threads=sig.num_threads or 128)
    return kernel, drv


class CountingValidate:
    """Wraps `validate_args` to count the launches that took the general path."""

    def __init__(self, monkeypatch) -> None:
        self.calls = 0
        self.real = kernel_module.validate_args
        monkeypatch.setattr(kernel_module, "validate_args", self)

    def __call__(self, *args: Any, **kwargs: Any):
        self.calls += 1
        return self.real(*args, **kwargs)


@pytest.fixture(scope="module")
def sig() -> Signature:
    return signature_from_program(parse_program((GOLDEN / "vector_add.vm").read_text()))


# ---- CPU: the fake torch -------------------------------------------------------------------------

def test_fake_tensors_look_like_torch_to_the_general_path(torch, sig) -> None:
    bound = validate_args(sig, [torch.Tensor(1000), torch.Tensor(1000), torch.Tensor(1000), 1000])
    assert bound[0].buffer.source == "torch" and bound[0].buffer.nbytes == 2000


def test_fast_path_launches_like_the_general_path(torch, sig, monkeypatch) -> None:
    kernel, drv = make_kernel(monkeypatch, sig)
    general = CountingValidate(monkeypatch)
    args = [torch.Tensor(1000, ptr=0x10000), torch.Tensor(1000, ptr=0x20000),
            torch.Tensor(1000, ptr=0x30000), 1000]
    kernel(*args)  # the general path: checks the sizes, the grid, launches
    assert general.calls == 1 and kernel._fast is not None
    kernel(*args)
    other = [torch.Tensor(1200, ptr=0x40000), torch.Tensor(1000, ptr=0x50000),
             torch.Tensor(1000, ptr=0x60000), 1000]
    kernel(*other)  # other tensors: x is larger (new sizes: general path once)
    kernel(*other)
    assert general.calls == 2
    assert len(drv.launches) == 4
    assert drv.launches[0] == drv.launches[1]
    assert drv.launches[0] == ((4, 1, 1), (128, 1, 1), 0, 0, [0x10000, 0x20000, 0x30000, 1000])
    assert drv.launches[2] == drv.launches[3]
    assert drv.launches[3][4] == [0x40000, 0x50000, 0x60000, 1000]
    kernel(*args, stream=77)  # an explicit stream, int handle
    assert drv.launches[-1][3] == 77 and general.calls == 2
    kernel(*args, grid=(1,))  # an explicit grid: the general path
    assert drv.launches[-1][0] == (1, 1, 1) and general.calls == 3


def test_prepared_launch_packs_every_scalar_type_as_the_general_path(torch, monkeypatch
                                                                     ) -> None:
    scalars = [("a", "int8", -5), ("b", "uint32", 2**32 - 1), ("c", "int64", -2**40),
               ("d", "uint64", 2**64 - 1), ("e", "f32", 1.5), ("f", "f16", -2.0),
               ("g", "bf16", 3), ("h", "f8e4m3", 1.0), ("i", "int32", 7)]
    sig = Signature("k", (ParamSpec("p", "pointer", parse("bf16")),
                          *[ParamSpec(n, "scalar", parse(t)) for n, t, _ in scalars]),
                    num_threads=32)
    kernel, drv = make_kernel(monkeypatch, sig)
    args = [torch.Tensor(8, "bfloat16", ptr=0x10000), *[v for _, _, v in scalars]]
    kernel(*args, grid=(1,))  # no grid in the signature: the general path
    reference = drv.launches[-1]
    assert reference[4] == [0x10000, -5, 2**32 - 1, -2**40, 2**64 - 1, 1.5, 0xC000, 0x4040,
                            0x38, 7]
    prepared = kernel.prepare(*args, grid=(1,))
    # (a ParamSpec built by hand assumes only the element alignment, 2 bytes for bf16)
    assert prepared.pointer_params == ("p",) and prepared.alignments == (2,)
    prepared.launch(0, 0x20000)
    assert drv.launches[-1] == (*reference[:4], [0x20000, *reference[4][1:]])
    with pytest.raises(ArgumentValueError, match=r"kernel k: argument p: address 0x20001 is "
                                                 r"not 2-byte aligned"):
        prepared.launch(0, 0x20001)
    assert len(drv.launches) == 2


def bad_arguments(torch) -> list[tuple[str, list[Any]]]:
    """Arguments for the vector_add kernel (x, y, out: f16; n: int32), each with one
    fault (another device: `test_other_device_message`)."""
    def args(**change: Any) -> list[Any]:
        a = {"x": torch.Tensor(1000, ptr=0x10000), "y": torch.Tensor(1000, ptr=0x20000),
             "out": torch.Tensor(1000, ptr=0x30000), "n": 1000}
        a.update(change)
        return [a["x"], a["y"], a["out"], a["n"]]

    return [
        ("too small", args(y=torch.Tensor(998, ptr=0x20000), n=999)),
        ("too small, sizes seen", args(out=torch.Tensor(500, ptr=0x30000))),
        ("float32", args(x=torch.Tensor(1000, "float32", ptr=0x10000))),
        ("bfloat16", args(out=torch.Tensor(1000, "bfloat16", ptr=0x30000))),
        ("complex", args(y=torch.Tensor(1000, "complex64", ptr=0x20000))),
        ("cpu", args(out=torch.Tensor(1000, device="cpu"))),
        ("misaligned", args(x=torch.Tensor(1000, ptr=0x10002))),
        ("8-byte aligned", args(out=torch.Tensor(1000, ptr=0x30008))),
        ("strided", args(y=torch.Tensor(1000, ptr=0x20000, stride=2))),
        ("scalar for a pointer", args(x=12345)),
        ("None for a pointer", args(out=None)),
        ("numpy array", args(x=np.zeros(1000, np.float16))),
        ("array for a scalar", args(n=torch.Tensor(1))),
        ("float for an int", args(n=1000.0)),
        ("str for an int", args(n="1000")),
        ("out of range", args(n=2**31)),
        ("past the bytes", args(n=1001)),
        ("too few", args()[:3]),
        ("too many", [*args(), 1]),
    ]


def test_fast_path_rejects_what_the_general_path_rejects(torch, sig, monkeypatch) -> None:
    for what, args in bad_arguments(torch):
        kernel, drv = make_kernel(monkeypatch, sig)  # a first call takes the general path
        with pytest.raises((ArgumentTypeError, ArgumentValueError)) as general:
            kernel(*args)
        expected = general.value
        assert not drv.launches, what
        kernel, drv = make_kernel(monkeypatch, sig)
        warm = [torch.Tensor(1000, ptr=0x10000), torch.Tensor(1000, ptr=0x20000),
                torch.Tensor(1000, ptr=0x30000), 1000]
        kernel(*warm)
        kernel(*warm)
        assert kernel._fast is not None and len(drv.launches) == 2, what
        with pytest.raises(type(expected)) as info:
            kernel(*args)
        assert str(info.value) == str(expected), what
        assert len(drv.launches) == 2, what  # nothing launched


def test_other_device_message(torch, sig, monkeypatch) -> None:
    kernel, drv = make_kernel(monkeypatch, sig)
    good = [torch.Tensor(1000, ptr=0x10000), torch.Tensor(1000, ptr=0x20000),
            torch.Tensor(1000, ptr=0x30000), 1000]
    kernel(*good)
    good[1] = torch.Tensor(1000, ptr=0x20000, index=1)
    with pytest.raises(ArgumentTypeError, match=r"kernel vector_add: argument y: const "
                                                r"ptr<f16> is on cuda:1, but the kernel runs "
                                                r"on cuda:0"):
        kernel(*good)
    assert len(drv.launches) == 1


def test_other_context_is_left_to_the_general_path(torch, sig, monkeypatch) -> None:
    kernel, drv = make_kernel(monkeypatch, sig)
    args = [torch.Tensor(1000, ptr=0x10000), torch.Tensor(1000, ptr=0x20000),
            torch.Tensor(1000, ptr=0x30000), 1000]
    kernel(*args)
    drv.current = 0xD0  # another context is current
    with pytest.raises(CudaError, match="was loaded in another CUDA context"):
        kernel(*args)
    assert len(drv.launches) == 1


def test_assumptions_are_checked_before_the_fast_path(torch, monkeypatch) -> None:
    text = """\
kernel k(a: ptr<f32>, n: int32) grid(1) warps(1) {
  assume cond=((n % 8) == 0)
  %g = global_view ptr=a, offset=0, strides=(1,) : global<f32>[n]
}
"""
    sig = signature_from_program(parse_program(text))
    kernel, drv = make_kernel(monkeypatch, sig)
    a = torch.Tensor(64, "float32")
    kernel(a, 64)
    kernel(a, 64)
    with pytest.raises(ArgumentValueError, match=r"assumes \(n % 8\) == 0, but n = 12"):
        kernel(a, 12)
    with pytest.raises(ArgumentValueError, match="too small"):
        kernel(a, 72)
    assert len(drv.launches) == 2


def test_real_torch_cpu_tensors_are_declined(sig, monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    kernel, drv = make_kernel(monkeypatch, sig)
    x = torch.zeros(1000, dtype=torch.float16)
    with pytest.raises(ArgumentTypeError, match=r"argument 0 \(x: const ptr<f16>\) is on the "
                                                r"cpu device \(torch.float16\)"):
        kernel(x, x, x, 1000)
    assert kernel._fast is not None and not kernel._fast.prepared and not drv.launches


# ---- GPU -----------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_torch_fast_path(monkeypatch) -> None:
    torch = cuda_torch()
    import tilevm as tv
    from tilevm.examples.vector_add import vector_add

    kernel = tv.compile(vector_add)
    n = 3000
    for seed in range(3):  # new tensors each time, the same sizes
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(n, device="cuda", generator=g)
        y = torch.randn(n, device="cuda", generator=g)
        out = torch.full((n,), float("nan"), device="cuda")
        kernel(x, y, out, n)
        torch.testing.assert_close(out, x + y)
    assert kernel._fast is not None and kernel._fast.prepared
    general = CountingValidate(monkeypatch)
    out.fill_(float("nan"))
    kernel(x, y, out, n)
    assert general.calls == 0  # the fast path launched
    torch.testing.assert_close(out, x + y)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):  # the current stream
        z = torch.zeros(n, device="cuda")
        kernel(x, y, z, n)
    s.synchronize()
    torch.testing.assert_close(z, x + y)
    with pytest.raises(ArgumentTypeError, match=r"argument 0 \(x: const ptr<f32>\) must hold "
                                                r"float32, got torch.float16"):
        kernel(x.half(), y, out, n)
    with pytest.raises(ArgumentValueError, match=r"argument 2 \(out: ptr<f32>\): address "
                                                 r"0x[0-9a-f]+ is not 16-byte aligned"):
        kernel(x, y, torch.zeros(n + 1, device="cuda")[1:], n)
    with pytest.raises(ArgumentTypeError, match=r"argument 1 \(y: const ptr<f32>\) is on the "
                                                r"cpu device"):
        kernel(x, y.cpu(), out, n)
    with pytest.raises(ArgumentValueError, match="contiguous"):
        kernel(x, torch.zeros(n, 2, device="cuda")[:, 0], out, n)
    with pytest.raises(ArgumentValueError, match="too small"):
        kernel(x, y, out[:-1], n)
    assert general.calls == 5
