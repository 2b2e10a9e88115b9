"""The GPU runtime: load PTX with the CUDA driver (cuda-python) and launch kernels.

    from tilevm.backend.runtime import load_module, signature_from_program
    module = load_module(ptx_text)
    kernel = module.get_function("vector_add", signature_from_program(program))
    kernel.launch(grid=(8,), block=(128,), shared_bytes=0, args=[x, y, out, n])

Context: the first call that needs the driver runs `cuInit` and, if the calling thread
has no current context, retains device 0's primary context (`TILEVM_DEVICE` picks
another) and pushes it. A context that is already current, e.g. PyTorch's (which is the
primary context of its current device), is used as it is, so tilevm and PyTorch/CuPy
share memory and streams. Modules belong to the context they were loaded in.

Launch arguments, in the order of the program's parameters:
- a pointer parameter takes a device array: a PyTorch tensor (`data_ptr()`), a
  `DeviceArray`, or any object with `__cuda_array_interface__` (CuPy, Numba) or DLPack
  (`__dlpack__` / `__dlpack_device__`, e.g. JAX). It must live on the GPU, be
  contiguous, hold elements of the pointer's dtype (f16: float16; bf16: bfloat16 or
  16-bit integer codes; 8-bit floats: torch's float8 types or 8-bit integer codes;
  sub-byte types: uint8/int8 *bytes* of densely packed values, `tilevm.dtypes.pack`;
  a `DeviceArray` of the very dtype always fits), be aligned as the compiled code
  assumes (`ParamSpec.align`: 16 bytes from `signature_from_program` by default, at
  least the element size), be writable if the kernel writes it, and be large enough
  for every global view the program takes of it whose extent depends only on scalar
  arguments;
- the scalar arguments must satisfy every `assume` at the top level of the program
  body whose condition depends only on scalar parameters (`tv.assume(N % 8 == 0)`):
  the compiled code relies on them;
- a scalar parameter takes a Python or numpy number (an int that fits an integer
  type; an int or float for a float type, whose magnitude is at most the type's
  largest finite value).
All of this is checked by `validate_args`, a pure function that needs no GPU, before
anything is launched; violations raise `ArgumentTypeError` (also a `TypeError`) or
`ArgumentValueError` (also a `ValueError`), both `VMError`s that name the parameter.
`Kernel.__call__` with PyTorch CUDA tensors and Python scalars of sizes it has launched
with before makes the same checks on a fast path (`_TorchFastPath`, ~10 us of host time
a launch), and leaves anything else, and every error, to the general path.

Parameter packing: pointers are passed as 64-bit addresses; integer scalars of up to
32 bits as 32-bit values (sign- or zero-extended), 64-bit ones as 64-bit values; f32 as a
float; f16/bf16 and narrower float types as their code zero-extended to 32 bits. (The
driver copies as many bytes as the PTX parameter declares, little-endian, so a `.u8`,
`.b16` or `.u32` parameter reads the right value either way.)

Streams: `launch(..., stream=)` takes a `torch.cuda.Stream`, a CuPy stream (`.ptr`), an
object with `__cuda_stream__`, a `CUstream` or an int handle; None means PyTorch's
current stream when PyTorch is imported and has initialised CUDA, else the default
stream (0).
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import struct
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tilevm.dtypes import DataType, encode, parse
from tilevm.ir.errors import VMError
from tilevm.ir.evaluate import evaluate
from tilevm.ir.expr import Binary, Const, Expr, ScalarCast, Select, Unary, Var, free_vars
from tilevm.ir.stmt import cluster_grid_problem, entry_registers

__all__ = [
    "ArgumentTypeError", "ArgumentValueError", "CudaError", "NoDriverError", "ModuleLoadError",
    "ParamSpec", "ViewSpec", "Signature", "BoundPointer", "BoundScalar",
    "signature_from_program", "validate_args", "describe_buffer", "BufferInfo",
    "Context", "ensure_context", "device_arch", "load_module", "load_artifact",
    "Module", "Kernel", "resolve_stream",
]

MAX_STATIC_SHARED = 48 * 1024  # above this a kernel must opt in to dynamic shared memory


# ---- errors --------------------------------------------------------------------------------

class ArgumentTypeError(VMError, TypeError):
    """A launch argument of the wrong kind or dtype, or on the wrong device."""


class ArgumentValueError(VMError, ValueError):
    """A launch argument with a bad value: misaligned, too small, out of range, ..."""


class CudaError(RuntimeError):
    """A CUDA driver call failed. `code` is the `CUresult` name."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class NoDriverError(CudaError):
    """cuda-python, the CUDA driver or a GPU is missing."""


class ModuleLoadError(CudaError):
    """The driver rejected a PTX module; `log` is the JIT's error log."""

    def __init__(self, message: str, code: str | None = None, log: str = "") -> None:
        super().__init__(message, code)
        self.log = log


# ---- the signature ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ParamSpec:
    """One kernel parameter: a pointer to elements of `dtype`, or a scalar of `dtype`.

    `align` (pointers) is the byte alignment the compiled code assumes of the address;
    0 means the element size (1 for sub-byte types)."""

    name: str
    kind: str  # "pointer" | "scalar"
    dtype: DataType
    readonly: bool = False
    align: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("pointer", "scalar"):
            raise ValueError(f"a parameter's kind is 'pointer' or 'scalar', not {self.kind!r}")
        object.__setattr__(self, "dtype", parse(self.dtype))

    @property
    def is_pointer(self) -> bool:
        return self.kind == "pointer"

    @property
    def element_bytes(self) -> int:
        return max(1, self.dtype.bits // 8)

    @property
    def required_align(self) -> int:
        return max(self.align, self.element_bytes) if self.is_pointer else 1

    def __str__(self) -> str:
        if self.is_pointer:
            return f"{self.name}: {'const ' if self.readonly else ''}ptr<{self.dtype}>"
        return f"{self.name}: {self.dtype}"

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "kind": self.kind, "dtype": self.dtype.name}
        if self.is_pointer:
            d.update(readonly=self.readonly, align=self.align)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ParamSpec:
        return cls(str(d["name"]), str(d["kind"]), parse(d["dtype"]),
                   bool(d.get("readonly", False)), int(d.get("align", 0)))


@dataclass(frozen=True)
class ViewSpec:
    """A global view of pointer `param` (element `offset + sum(c[i] * strides[i])`, at
    bit `element * dtype.bits`), whose extent depends only on scalar parameters."""

    param: str
    dtype: DataType
    offset: Expr
    shape: tuple[Expr, ...]
    strides: tuple[Expr, ...]
    name: str = ""  # the view's tensor in the program (what a `tma` copy names)


@dataclass(frozen=True)
class TensorMapSpec:
    """A TMA tensor-map parameter of a kernel (after its own parameters, in order): the
    view it describes (`ViewSpec.name`), that view's dimensions in the map's order
    (innermost, unit stride, first), the box (elements per dimension, same order) and
    the swizzle (0, 32, 64 or 128 bytes). Encoded at each launch (`encode_tensor_maps`)."""

    view: str
    dims: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int


@dataclass(frozen=True)
class AssumeSpec:
    """A condition over scalar parameters that the compiled kernel relies on (a
    top-level `assume`); `text` is the condition as written in the program, `where`
    the user's source line ("" if unknown)."""

    cond: Expr
    text: str
    where: str = ""


@dataclass(frozen=True)
class Signature:
    """What the runtime knows of a kernel: its parameters, the global views used to
    check buffer sizes, the grid (expressions over scalar parameters) and block size."""

    name: str
    params: tuple[ParamSpec, ...]
    views: tuple[ViewSpec, ...] = ()
    grid: tuple[Expr, ...] = ()
    num_threads: int = 0
    assumptions: tuple[AssumeSpec, ...] = ()
    tensor_maps: tuple[TensorMapSpec, ...] = ()
    cluster: int = 1  # blocks per cluster along the grid's first dimension

    def param(self, name: str) -> ParamSpec:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def __str__(self) -> str:
        return f"{self.name}({', '.join(str(p) for p in self.params)})"

    def grid_for(self, args: Sequence[Any]) -> tuple[int, int, int]:
        """The launch grid for these arguments (validated first)."""
        return self.grid_of(validate_args(self, args))

    def grid_of(self, bound: Sequence[BoundPointer | BoundScalar]) -> tuple[int, int, int]:
        """The launch grid for validated arguments (`validate_args`)."""
        if not self.grid:
            raise VMError(f"kernel {self.name}: the signature has no grid; pass one")
        env = {p.name: b.value for p, b in zip(self.params, bound)
               if isinstance(b, BoundScalar)}
        dims = []
        for axis, e in enumerate(self.grid):
            try:
                n = _eval(e, env)
            except _Unknown as exc:
                raise VMError(f"kernel {self.name}: grid dimension {axis} ({e}) cannot be "
                              f"computed from the arguments ({exc})") from None
            if n < 0:
                raise ArgumentValueError(f"kernel {self.name}: grid dimension {axis} ({e}) "
                                         f"is {n} for these arguments")
            dims.append(n)
        problem = cluster_grid_problem(self.cluster, self.grid[0], dims[0])
        if problem:
            raise ArgumentValueError(f"kernel {self.name} {problem}")
        return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]

    # JSON (for the on-disk cache): expressions travel as IR text.
    def to_json(self) -> dict[str, Any]:
        from tilevm.ir.printer import format_expr

        return {"name": self.name, "params": [p.to_json() for p in self.params],
                "views": [{"param": v.param, "dtype": v.dtype.name, "name": v.name,
                           "offset": format_expr(v.offset),
                           "shape": [format_expr(s) for s in v.shape],
                           "strides": [format_expr(s) for s in v.strides]}
                          for v in self.views],
                "grid": [format_expr(g) for g in self.grid], "num_threads": self.num_threads,
                "assumptions": [{"cond": format_expr(a.cond), "text": a.text,
                                 "where": a.where} for a in self.assumptions],
                "tensor_maps": [{"view": m.view, "dims": list(m.dims), "box": list(m.box),
                                 "swizzle": m.swizzle} for m in self.tensor_maps],
                "cluster": self.cluster}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Signature:
        from tilevm.ir.parser import parse_expr

        params = tuple(ParamSpec.from_json(p) for p in d["params"])
        scope = {p.name: Var(p.name, p.dtype) for p in params if not p.is_pointer}

        def ex(text: str) -> Expr:
            return parse_expr(text, scope)

        views = tuple(ViewSpec(v["param"], parse(v["dtype"]), ex(v["offset"]),
                               tuple(ex(s) for s in v["shape"]),
                               tuple(ex(s) for s in v["strides"]), str(v.get("name", "")))
                      for v in d.get("views", ()))
        assumptions = tuple(AssumeSpec(ex(a["cond"]), str(a["text"]), str(a.get("where", "")))
                            for a in d.get("assumptions", ()))
        maps = tuple(TensorMapSpec(str(m["view"]), tuple(int(x) for x in m["dims"]),
                                   tuple(int(x) for x in m["box"]), int(m["swizzle"]))
                     for m in d.get("tensor_maps", ()))
        return cls(str(d.get("name", "kernel")), params, views,
                   tuple(ex(g) for g in d.get("grid", ())), int(d.get("num_threads", 0)),
                   assumptions, maps, int(d.get("cluster", 1)))


def signature_from_program(program: Any, *, pointer_align: int = 16) -> Signature:
    """The `Signature` of a VM `Program`: its parameters in order (pointer parameters
    assume `pointer_align`-byte aligned addresses), its grid and block size, and the
    global views at the top level of its body whose offset, shape and strides depend
    only on scalar parameters (through top-level `let`s that are never reassigned),
    and the top-level `assume`s whose conditions depend only on them."""
    from tilevm.ir.instructions import Assume, GlobalView
    from tilevm.ir.printer import format_expr
    from tilevm.ir.stmt import AssignVar, For, If, Let, Seq
    from tilevm.ir.types import Pointer

    params: list[ParamSpec] = []
    scalars: set[Var] = set()
    for p in program.params:
        if isinstance(p, Pointer):
            params.append(ParamSpec(p.name, "pointer", p.type.dtype, p.type.readonly,
                                    pointer_align))
        elif isinstance(p, Var):
            params.append(ParamSpec(p.name, "scalar", p.dtype))
            scalars.add(p)
        else:
            raise VMError(f"kernel {program.name}: parameter {p!r} is neither a pointer nor "
                          f"a scalar")

    assigned: set[Var] = set()

    def collect(stmt: Any) -> None:
        if isinstance(stmt, AssignVar):
            assigned.add(stmt.var)
        elif isinstance(stmt, Seq):
            for s in stmt.body:
                collect(s)
        elif isinstance(stmt, For):
            collect(stmt.body)
        elif isinstance(stmt, If):
            collect(stmt.then_body)
            if stmt.else_body is not None:
                collect(stmt.else_body)

    collect(program.body)
    lets: dict[Var, Expr] = {}
    views: list[ViewSpec] = []
    assumptions: list[AssumeSpec] = []
    for stmt in program.body.body:
        if isinstance(stmt, Let) and stmt.var not in assigned:
            value = _subst(stmt.value, lets)
            if free_vars(value) <= scalars and _static(value):
                lets[stmt.var] = value
        elif isinstance(stmt, GlobalView):
            parts = [stmt.offset, *stmt.out.type.shape, *stmt.strides]
            exprs = [_subst(e if isinstance(e, Expr) else Const(int(e), _INT32), lets)
                     for e in parts]
            if all(free_vars(e) <= scalars and _static(e) for e in exprs):
                ndim = len(stmt.out.type.shape)
                views.append(ViewSpec(stmt.ptr.name, stmt.out.type.dtype, exprs[0],
                                      tuple(exprs[1:1 + ndim]), tuple(exprs[1 + ndim:]),
                                      stmt.out.name))
        elif isinstance(stmt, Assume):
            cond = _subst(stmt.cond, lets)
            if free_vars(cond) <= scalars and _static(cond):
                assumptions.append(AssumeSpec(cond, _strip_parens(format_expr(stmt.cond)),
                                              str(stmt.loc) if stmt.loc else ""))
    return Signature(program.name, tuple(params), tuple(views), tuple(program.grid),
                     program.block_threads, tuple(assumptions), cluster=program.cluster)


def _strip_parens(text: str) -> str:
    """`N % 8 == 0` for the printer's `((N % 8) == 0)`: one outer pair goes."""
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, ch in enumerate(text):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0 and i < len(text) - 1:
                return text  # the first "(" closes early: `(a) + (b)`
        return text[1:-1]
    return text


_INT32 = parse("int32")


def _static(e: Expr) -> bool:
    """No block index inside (the value is the same for every block)."""
    if isinstance(e, (Const, Var)):
        return True
    if isinstance(e, Binary):
        return _static(e.lhs) and _static(e.rhs)
    if isinstance(e, (Unary, ScalarCast)):
        return _static(e.operand)
    if isinstance(e, Select):
        return _static(e.cond) and _static(e.if_true) and _static(e.if_false)
    return False


def _subst(e: Expr, env: Mapping[Var, Expr]) -> Expr:
    if isinstance(e, Var):
        return env.get(e, e)
    if isinstance(e, Binary):
        return replace(e, lhs=_subst(e.lhs, env), rhs=_subst(e.rhs, env))
    if isinstance(e, (Unary, ScalarCast)):
        return replace(e, operand=_subst(e.operand, env))
    if isinstance(e, Select):
        return replace(e, cond=_subst(e.cond, env), if_true=_subst(e.if_true, env),
                       if_false=_subst(e.if_false, env))
    return e


class _Unknown(Exception):
    pass


def _eval(e: Expr, env: Mapping[str, int | float]) -> int | float:
    """A scalar expression's value over the scalar arguments (ir/evaluate.py, the
    interpreter's semantics); `_Unknown` if it needs anything else."""

    def lookup(var: Var) -> int | float:
        if var.name not in env:
            raise _Unknown(f"{var.name} is not a scalar argument")
        return env[var.name]

    try:
        return evaluate(e, lookup)
    except VMError as err:  # block_idx, a zero divisor, ...: not decidable before launch
        raise _Unknown(err.message) from None


# ---- describing device buffers (no driver needed) -----------------------------------------

@dataclass(frozen=True)
class BufferInfo:
    """What the runtime needs of a device array. `dtype` is a normalized element-type
    code ('f4', 'f2', 'i1', 'u1', 'b1', 'bf16', 'f8e4m3', ..., see `_TYPESTR`), `device`
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


_TORCH_DTYPES = {
    "float16": "f2", "float32": "f4", "float64": "f8", "bfloat16": "bf16",
    "int8": "i1", "uint8": "u1", "int16": "i2", "uint16": "u2", "int32": "i4", "uint32": "u4",
    "int64": "i8", "uint64": "u8", "bool": "b1", "float8_e4m3fn": "f8e4m3",
    "float8_e5m2": "f8e5m2",
}
_DL_CODES = {0: "i", 1: "u", 2: "f"}
_DL_SPECIAL = {(4, 16): "bf16", (6, 8): "b1", (10, 8): "f8e4m3", (12, 8): "f8e5m2"}
_READABLE = {"f2": "float16", "f4": "float32", "f8": "float64", "i1": "int8", "u1": "uint8",
             "i2": "int16", "u2": "uint16", "i4": "int32", "u4": "uint32", "i8": "int64",
             "u8": "uint64", "b1": "bool", "bf16": "bfloat16", "f8e4m3": "float8_e4m3fn",
             "f8e5m2": "float8_e5m2"}
_CUDA_DL_DEVICES = {2: "cuda", 13: "cuda_managed"}
_DL_DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan",
                    8: "metal", 10: "rocm", 13: "cuda_managed"}


def _itemsize(code: str) -> int:
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


def _is_torch_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def describe_buffer(obj: Any) -> BufferInfo | None:
    """The `BufferInfo` of a device-array-like object, or None if it is not one (a CPU
    array is described, with its device name, so the caller can say so)."""
    from tilevm.backend.device_array import DeviceArray

    if isinstance(obj, DeviceArray):
        return BufferInfo(obj.ptr, obj.nbytes, obj.storage_code, f"DeviceArray[{obj.dtype}]",
                          "cuda", obj.device_id, True, False, obj.dtype, "DeviceArray")
    if _is_torch_tensor(obj):
        name = str(obj.dtype).rsplit(".", 1)[-1]
        code = _TORCH_DTYPES.get(name, f"torch.{name}")
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
                      f"{typestr} ({_READABLE.get(code, code)})", "cuda", None, contiguous,
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
                      f"DLPack {_READABLE.get(code, code)}", "cuda", dev_id, contiguous,
                      readonly, None, "DLPack")


# ---- validation (pure) -------------------------------------------------------------------

@dataclass(frozen=True)
class BoundPointer:
    param: ParamSpec
    buffer: BufferInfo

    @property
    def address(self) -> int:
        return self.buffer.address


@dataclass(frozen=True)
class BoundScalar:
    param: ParamSpec
    value: int | float


def _accepted_codes(dtype: DataType) -> tuple[str, ...]:
    """The element-type codes a pointer to `dtype` accepts (see the module docstring)."""
    if dtype.bits < 8:
        return ("u1", "i1")
    if dtype.name == "f32":
        return ("f4",)
    if dtype.name == "f16":
        return ("f2",)
    if dtype.name == "bf16":
        return ("bf16", "u2", "i2")
    if dtype.is_float:  # 8-bit float formats: their own torch type, or 8-bit codes
        own = ("f8e4m3",) if dtype.name == "f8e4m3" else ("f8e5m2",) if dtype.name == "f8e5m2" \
            else ()
        return (*own, "u1", "i1")
    return (f"{'i' if dtype.is_signed else 'u'}{dtype.bits // 8}",)


def _expected_text(dtype: DataType) -> str:
    codes = _accepted_codes(dtype)
    names = " or ".join(_READABLE.get(c, c) for c in codes)
    if dtype.bits < 8:
        return (f"{names} bytes of densely packed {dtype} values "
                f"(tilevm.dtypes.pack; {dtype.bits} bits each)")
    if dtype.name == "bf16":
        return "bfloat16 (or uint16/int16 bf16 codes)"
    if dtype.is_float and dtype.bits == 8:
        return f"{names} ({dtype} codes)"
    return names


def _what(i: int, p: ParamSpec, sig: Signature) -> str:
    return f"kernel {sig.name}: argument {i} ({p})"


def validate_args(signature: Signature, args: Sequence[Any],
                  checked: set[tuple[Any, ...]] | None = None
                  ) -> tuple[BoundPointer | BoundScalar, ...]:
    """Check `args` against `signature` (no GPU needed) and bind them; raises
    `ArgumentTypeError` / `ArgumentValueError` naming the first bad argument.

    The checks that depend only on the scalar arguments and the buffers' sizes (the
    assumptions, the views fitting their buffers) are skipped when `checked` holds that
    combination already, and recorded there when they pass: a kernel called again and
    again with the same sizes (every decode step) pays only for binding its arguments."""
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise ArgumentTypeError(f"kernel {signature.name}: arguments must be a list or tuple, "
                                f"got {type(args).__name__}")
    params = signature.params
    if len(args) != len(params):
        raise ArgumentTypeError(
            f"kernel {signature.name} takes {len(params)} argument(s) "
            f"({', '.join(str(p) for p in params)}), got {len(args)}")
    bound: list[BoundPointer | BoundScalar] = []
    for i, (p, a) in enumerate(zip(params, args)):
        if p.is_pointer:
            bound.append(_bind_pointer(i, p, a, signature))
        else:
            bound.append(_bind_scalar(i, p, a, signature))
    key = tuple(b.value if isinstance(b, BoundScalar) else b.buffer.nbytes for b in bound)
    if checked is None or key not in checked:
        _check_assumptions(signature, bound)
        _check_sizes(signature, bound)
        if checked is not None:
            checked.add(key)
    return tuple(bound)


def _check_assumptions(sig: Signature, bound: Sequence[BoundPointer | BoundScalar]) -> None:
    """Every top-level `assume` over scalar arguments holds (the code relies on it)."""
    env = {b.param.name: b.value for b in bound if isinstance(b, BoundScalar)}
    for a in sig.assumptions:
        try:
            holds = _eval(a.cond, env)
        except _Unknown:
            continue  # float arithmetic etc.: left to the kernel's own semantics
        if not holds:
            names = sorted({v.name for v in free_vars(a.cond)})
            values = ", ".join(f"{n} = {env[n]}" for n in names if n in env)
            where = f" ({a.where})" if a.where else ""
            raise ArgumentValueError(f"kernel {sig.name} assumes {a.text}{where}, but "
                                     f"{values or 'it does not hold for these arguments'}")


def _bind_pointer(i: int, p: ParamSpec, a: Any, sig: Signature) -> BoundPointer:
    # The messages are built only on the error paths: binding runs at every launch.
    def what() -> str:
        return _what(i, p, sig)

    def expected() -> str:
        return _expected_text(p.dtype)

    if isinstance(a, (bool, int, float)) or a is None:
        raise ArgumentTypeError(f"{what()} must be a CUDA array of {expected()}, got "
                                f"{type(a).__name__} {a!r}")
    info = describe_buffer(a)
    if info is None:
        raise ArgumentTypeError(
            f"{what()} must be a CUDA array of {expected()} (a torch tensor, a DeviceArray, or an "
            f"object with __cuda_array_interface__ or __dlpack__), got {type(a).__name__}")
    if info.device not in ("cuda", "cuda_managed"):
        raise ArgumentTypeError(f"{what()} is on the {info.device} device ({info.dtype_name}); "
                                f"it must be a CUDA array (e.g. tensor.cuda())")
    fits = (info.tilevm_dtype == p.dtype) or info.dtype in _accepted_codes(p.dtype)
    if not fits:
        raise ArgumentTypeError(f"{what()} must hold {expected()}, got {info.dtype_name}")
    if not info.contiguous:
        raise ArgumentValueError(f"{what()} must be contiguous (e.g. tensor.contiguous())")
    align = p.required_align
    if info.address % align:
        raise ArgumentValueError(
            f"{what()}: address {info.address:#x} is not {align}-byte aligned, as the compiled "
            f"kernel assumes (it is {info.address % align} bytes past a multiple of {align}; "
            f"a slice that starts mid-buffer does this: pass a fresh or .clone()d array)")
    if p.readonly is False and info.readonly:
        raise ArgumentValueError(f"{what()}: the kernel writes through this pointer but the "
                                 f"array is read-only")
    return BoundPointer(p, info)


def _bind_scalar(i: int, p: ParamSpec, a: Any, sig: Signature) -> BoundScalar:
    def what() -> str:
        return _what(i, p, sig)

    dtype = p.dtype
    if isinstance(a, np.generic) or (isinstance(a, np.ndarray) and a.ndim == 0):
        a = a.item()
    if _looks_like_array(a):
        raise ArgumentTypeError(f"{what()} is a scalar; got an array ({type(a).__name__})")
    if dtype.is_float:
        if isinstance(a, bool) or not isinstance(a, (int, float)):
            raise ArgumentTypeError(f"{what()} must be a number, got {type(a).__name__} {a!r}")
        v = float(a)
        if math.isnan(v) and not dtype.has_nan:
            raise ArgumentValueError(f"{what()}: {dtype} has no NaN")
        if math.isinf(v) and not dtype.has_inf:
            raise ArgumentValueError(f"{what()}: {dtype} has no infinity")
        if math.isfinite(v) and abs(v) > dtype.max:
            raise ArgumentValueError(f"{what()}: {a!r} is out of range for {dtype} "
                                     f"(largest finite value {dtype.max!r})")
        return BoundScalar(p, v)
    if isinstance(a, bool):
        a = int(a)
    if not isinstance(a, int):
        raise ArgumentTypeError(f"{what()} must be an int, got {type(a).__name__} {a!r}")
    lo, hi = _int_range(dtype)
    if not lo <= a <= hi:
        raise ArgumentValueError(f"{what()}: {a} is out of range for {dtype} [{lo}, {hi}]")
    return BoundScalar(p, a)


@functools.cache
def _int_range(dtype: DataType) -> tuple[int, int]:
    return int(dtype.min_exact), int(dtype.max_exact)


def _looks_like_array(a: Any) -> bool:
    """Whether `a` is an array (arrays passed for scalars are rejected)."""
    return (_is_torch_tensor(a) or hasattr(a, "__cuda_array_interface__")
            or hasattr(a, "__dlpack__") or isinstance(a, np.ndarray)
            or type(a).__name__ == "DeviceArray")


def _check_sizes(sig: Signature, bound: Sequence[BoundPointer | BoundScalar]) -> None:
    env = {b.param.name: b.value for b in bound if isinstance(b, BoundScalar)}
    pointers = {b.param.name: (i, b) for i, b in enumerate(bound)
                if isinstance(b, BoundPointer)}
    for view in sig.views:
        if view.param not in pointers:
            continue
        i, b = pointers[view.param]
        try:
            offset = _eval(view.offset, env)
            shape = [_eval(s, env) for s in view.shape]
            strides = [_eval(s, env) for s in view.strides]
        except _Unknown:
            continue
        if any(n <= 0 for n in shape):
            continue  # an empty view touches nothing
        lo = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
        hi = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
        bits = view.dtype.bits
        have = b.buffer.nbytes * 8 // bits  # whole elements of the view's dtype
        if lo < 0 or hi >= have:
            dims = ", ".join(str(n) for n in shape)
            need = -(-(hi + 1) * bits // 8)
            raise ArgumentValueError(
                f"{_what(i, b.param, sig)} is too small for these sizes: the kernel views it "
                f"as {view.dtype}[{dims}] reaching element {hi if lo >= 0 else lo} "
                f"({need} bytes), but the array has {b.buffer.nbytes} bytes ({have} "
                f"{view.dtype} elements)")


# ---- the driver --------------------------------------------------------------------------

_init_lock = threading.Lock()
_initialised = False
_primary: dict[int, Any] = {}
_local = threading.local()


def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # cuda-python < 12.6
        except ImportError:
            raise NoDriverError("the GPU runtime needs cuda-python (`pip install cuda-python`)"
                                ) from None
    return driver


def _name(drv: Any, err: Any) -> str:
    try:
        e, s = drv.cuGetErrorName(err)
        return s.decode() if isinstance(s, bytes) else str(s)
    except Exception:
        return str(err)


def _describe_err(drv: Any, err: Any) -> str:
    try:
        e, s = drv.cuGetErrorString(err)
        return s.decode() if isinstance(s, bytes) else str(s)
    except Exception:
        return ""


def _call(what: str, result: Any) -> Any:
    """Unpack a cuda-python result tuple `(err, *values)`, raising `CudaError`."""
    drv = _driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        name = _name(drv, err)
        raise CudaError(f"{what} failed: {name}: {_describe_err(drv, err)}", name)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@dataclass(frozen=True)
class Context:
    handle: Any
    device: int  # the device ordinal

    @property
    def arch(self) -> str:
        return device_arch(self.device)


def _init() -> Any:
    global _initialised
    drv = _driver()
    with _init_lock:
        if not _initialised:
            try:
                (err,) = drv.cuInit(0)
            except Exception as exc:  # no libcuda.so: cuda-python raises on first use
                raise NoDriverError(f"the CUDA driver could not be loaded ({exc}); the GPU "
                                    "runtime needs an NVIDIA GPU and driver") from None
            if err != drv.CUresult.CUDA_SUCCESS:
                raise NoDriverError(f"cuInit failed: {_name(drv, err)}: "
                                    f"{_describe_err(drv, err)} (no usable GPU?)",
                                    _name(drv, err))
            count = _call("cuDeviceGetCount", drv.cuDeviceGetCount())
            if count == 0:
                raise NoDriverError("the CUDA driver reports no GPU")
            _initialised = True
    return drv


def ensure_context() -> Context:
    """The calling thread's current CUDA context, making the primary context of device
    `TILEVM_DEVICE` (default 0) current first if the thread has none."""
    drv = _init()
    ctx = _call("cuCtxGetCurrent", drv.cuCtxGetCurrent())
    if ctx is not None and int(ctx) != 0:
        dev = _call("cuCtxGetDevice", drv.cuCtxGetDevice())
        return Context(ctx, int(dev))
    ordinal = int(os.environ.get("TILEVM_DEVICE", "0"))
    dev = _call(f"cuDeviceGet({ordinal})", drv.cuDeviceGet(ordinal))
    with _init_lock:
        if ordinal not in _primary:
            _primary[ordinal] = _call("cuDevicePrimaryCtxRetain",
                                      drv.cuDevicePrimaryCtxRetain(dev))
        ctx = _primary[ordinal]
    _call("cuCtxPushCurrent", drv.cuCtxPushCurrent(ctx))
    return Context(ctx, ordinal)


def _attribute(attr_name: str, device: int) -> int:
    drv = _driver()
    attr = getattr(drv.CUdevice_attribute, attr_name)
    dev = _call("cuDeviceGet", drv.cuDeviceGet(device))
    return int(_call(f"cuDeviceGetAttribute({attr_name})", drv.cuDeviceGetAttribute(attr, dev)))


def device_arch(device: int | None = None) -> str:
    """The `sm_XY` name of a device (the current context's by default)."""
    if device is None:
        device = ensure_context().device
    else:
        _init()
    major = _attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR", device)
    minor = _attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR", device)
    return f"sm_{major}{minor}"


# ---- modules and kernels -----------------------------------------------------------------

_LOG_BYTES = 64 * 1024


class Module:
    """A loaded PTX module (in the context that was current when it was loaded)."""

    def __init__(self, handle: Any, context: Context, ptx: str, info_log: str = "") -> None:
        self.handle = handle
        self.context = context
        self.ptx = ptx
        self.info_log = info_log
        self._kernels: dict[str, Kernel] = {}

    def get_function(self, name: str, signature: Signature | None = None, *,
                     num_threads: int | None = None, shared_bytes: int = 0) -> Kernel:
        """The kernel `name`; with a `signature`, launches validate their arguments."""
        if self.handle is None:
            raise CudaError("the module was unloaded")
        drv = _driver()
        try:
            fn = _call(f"cuModuleGetFunction({name!r})",
                       drv.cuModuleGetFunction(self.handle, name.encode()))
        except CudaError as exc:
            raise CudaError(f"no kernel {name!r} in the module ({exc})", exc.code) from None
        return Kernel(self, fn, name, signature, num_threads=num_threads,
                      shared_bytes=shared_bytes)

    def unload(self) -> None:
        if self.handle is not None:
            drv = _driver()
            _call("cuModuleUnload", drv.cuModuleUnload(self.handle))
            self.handle = None


def load_module(ptx: str | bytes) -> Module:
    """Load PTX text into the current context (`ensure_context`). A rejected module raises
    `ModuleLoadError` with the JIT compiler's error log (or, where the driver gave none,
    ptxas' diagnosis of the text for this device)."""
    ctx = ensure_context()
    drv = _driver()
    text = ptx.decode() if isinstance(ptx, bytes) else ptx
    image = text.encode() + b"\0"
    err_buf = bytearray(_LOG_BYTES)
    info_buf = bytearray(_LOG_BYTES)
    opt = drv.CUjit_option
    options = [opt.CU_JIT_ERROR_LOG_BUFFER, opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
               opt.CU_JIT_INFO_LOG_BUFFER, opt.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES]
    values = [err_buf, _LOG_BYTES, info_buf, _LOG_BYTES]
    try:
        err, handle = drv.cuModuleLoadDataEx(image, len(options), options, values)
    except (TypeError, ValueError):  # bindings that take no buffers: no log
        err, handle = drv.cuModuleLoadData(image)
    if err != drv.CUresult.CUDA_SUCCESS:
        from tilevm.backend.ptxas import annotate_log

        log = _cstr(err_buf)
        shown = annotate_log(log, text)[0] if log else _ptxas_diagnosis(text, ctx)
        name = _name(drv, err)
        raise ModuleLoadError(f"the CUDA driver could not load the PTX module: {name}: "
                              f"{_describe_err(drv, err)}" + (f"\n{shown}" if shown else ""),
                              name, log or shown)
    return Module(handle, ctx, text, _cstr(info_buf))


def _cstr(buf: bytearray) -> str:
    return bytes(buf).split(b"\0", 1)[0].decode(errors="replace").strip()


def _ptxas_diagnosis(ptx: str, ctx: Context) -> str:
    try:
        from tilevm.backend.ptxas import SUPPORTED_ARCHS, PTXError, check_ptx

        arch = ctx.arch
        check_ptx(ptx, arch if arch in SUPPORTED_ARCHS else "sm_80")
    except PTXError as exc:
        return str(exc)
    except Exception:
        return ""
    return ""


def load_artifact(artifact: Any) -> Kernel:
    """Load a cached `cache.Artifact` and return its kernel, with its signature (from
    `artifact.extra["signature"]` if there, else from `artifact.params`)."""
    sig_json = artifact.extra.get("signature") if artifact.extra else None
    if sig_json is None:
        sig_json = {"name": artifact.kernel_name, "params": list(artifact.params),
                    "num_threads": artifact.num_threads}
    signature = Signature.from_json(sig_json)
    module = load_module(artifact.ptx)
    kernel = module.get_function(artifact.kernel_name, signature,
                                 num_threads=artifact.num_threads,
                                 shared_bytes=artifact.shared_bytes)
    if "setmaxnreg.inc" in artifact.ptx:
        check_entry_registers(kernel, artifact.num_threads)
    return kernel


def check_entry_registers(kernel: Kernel, block_threads: int) -> None:
    """A kernel whose producer warpgroup gives registers to the other warps
    (`setmaxnreg`) must start with the registers `Program.body_registers` was computed
    from: with fewer, the other warps' `setmaxnreg.inc` would wait forever for registers
    the block's pool does not hold."""
    expected = entry_registers(block_threads)
    got = kernel.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS")
    if got != expected:
        raise ModuleLoadError(
            f"kernel {kernel.name} was compiled to {got} registers a thread, not the "
            f"{expected} that its {block_threads} threads' setmaxnreg assumes (it would "
            "hang): the PTX assembler did not give it the whole register file")


def resolve_stream(stream: Any) -> int:
    """The CUstream handle (an int) for `stream` (see the module docstring)."""
    if stream is None:
        torch = sys.modules.get("torch")
        if torch is not None:
            try:
                if torch.cuda.is_initialized():
                    return _torch_current_stream(torch)
            except Exception:
                pass
        return 0
    if isinstance(stream, bool):
        raise TypeError("a stream is a stream object or an int handle, not a bool")
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        proto = stream.__cuda_stream__
        value = proto() if callable(proto) else proto
        return int(value[1]) if isinstance(value, tuple) else int(value)
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream / ExternalStream
        return int(stream.cuda_stream)
    if hasattr(stream, "ptr"):  # cupy.cuda.Stream
        return int(stream.ptr)
    try:
        return int(stream)  # a cuda-python CUstream
    except (TypeError, ValueError):
        raise TypeError(f"cannot use {type(stream).__name__} as a CUDA stream (pass a "
                        f"torch.cuda.Stream, a CuPy stream, a CUstream or an int handle)"
                        ) from None


def _torch_current_stream(torch: Any) -> int:
    """PyTorch's current stream on its current device, as `torch.cuda.current_stream()`
    gives it, without building a `torch.cuda.Stream` (that costs ~4 us a launch)."""
    c = torch._C
    raw = getattr(c, "_cuda_getCurrentRawStream", None)
    get_device = getattr(c, "_cuda_getDevice", None)
    if raw is not None and get_device is not None:
        return int(raw(get_device()))
    return int(torch.cuda.current_stream().cuda_stream)


def _dim3(value: int | Sequence[int], what: str) -> tuple[int, int, int]:
    dims = [value] if isinstance(value, int) else list(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and not isinstance(d, bool)
                                           for d in dims):
        raise ArgumentTypeError(f"{what} must be 1 to 3 ints, got {value!r}")
    if any(d < 0 for d in dims):
        raise ArgumentValueError(f"{what} {tuple(dims)} has a negative dimension")
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


_MAX_GRID = (2**31 - 1, 65535, 65535)


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
class _LaunchParams:
    values: list[Any] = field(default_factory=list)
    array: Any = None

    @property
    def address(self) -> int:
        return ctypes.addressof(self.array) if self.array is not None else 0


_TMA_TYPES = {8: "UINT8", 16: "FLOAT16", 32: "FLOAT32", 64: "FLOAT64"}


def encode_tensor_maps(sig: Signature, bound: Sequence[BoundPointer | BoundScalar]) -> list:
    """The `CUtensorMap` of each of the kernel's tensor-map parameters for these
    arguments: the view's address, extents and byte strides evaluated over the scalar
    arguments (an empty view: one element of a zeroed buffer). A view TMA cannot
    describe (an address or stride not a multiple of 16 bytes) is an
    `ArgumentValueError` naming it, before the launch."""
    drv = _driver()
    env = {b.param.name: b.value for b in bound if isinstance(b, BoundScalar)}
    pointers = {b.param.name: b for b in bound if isinstance(b, BoundPointer)}
    views = {v.name: v for v in sig.views}
    maps = []
    for spec in sig.tensor_maps:
        view = views[spec.view]
        elem = view.dtype.bits // 8
        offset = int(_eval(view.offset, env))
        shape = [int(_eval(e, env)) for e in view.shape]
        strides = [int(_eval(e, env)) for e in view.strides]
        address = pointers[view.param].address + offset * elem
        dims = [shape[d] for d in spec.dims]
        gstrides = [strides[d] * elem for d in spec.dims[1:]]
        if min(dims) < 1:  # nothing to read: every copy from it is zero fill. A map
            # cannot be empty, so it describes one element of a zeroed buffer instead
            address, dims, gstrides = _zero_block(), [1] * len(dims), [16] * len(gstrides)
        if address % 16 or any(st % 16 for st in gstrides):
            raise ArgumentValueError(
                f"kernel {sig.name}: the view of {view.param} ({spec.view}) starts at "
                f"{address:#x} with byte strides {gstrides}: the tensor memory "
                f"accelerator needs 16-byte multiples")
        name = "BFLOAT16" if view.dtype.name == "bf16" else _TMA_TYPES[view.dtype.bits]
        dtype = getattr(drv.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{name}")
        swizzle = getattr(drv.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_NONE"
                          if not spec.swizzle else f"CU_TENSOR_MAP_SWIZZLE_{spec.swizzle}B")
        err, tmap = drv.cuTensorMapEncodeTiled(
            dtype, len(dims), address, [drv.cuuint64_t(d) for d in dims],
            [drv.cuuint64_t(st) for st in gstrides], [drv.cuuint32_t(b) for b in spec.box],
            [drv.cuuint32_t(1)] * len(dims),
            drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
            drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        _call(f"cuTensorMapEncodeTiled({sig.name}: {spec.view})", (err,))
        maps.append(tmap)
    return maps


_zero_blocks: dict[int, int] = {}  # context handle -> device address (`_zero_block`)
ZERO_BLOCK_BYTES = 256


def _zero_block() -> int:
    """A zeroed device buffer of the current context, allocated once: what the tensor map
    of an empty view points at (its one element, 0, and zero fill elsewhere)."""
    drv = _driver()
    ctx = int(ensure_context().handle)
    if ctx not in _zero_blocks:
        address = int(_call(f"cuMemAlloc({ZERO_BLOCK_BYTES})", drv.cuMemAlloc(ZERO_BLOCK_BYTES)))
        _call("cuMemsetD8", drv.cuMemsetD8(address, 0, ZERO_BLOCK_BYTES))
        _zero_blocks[ctx] = address
    return _zero_blocks[ctx]


def _pack(bound: Sequence[BoundPointer | BoundScalar]) -> _LaunchParams:
    values: list[Any] = []
    for b in bound:
        if isinstance(b, BoundPointer):
            values.append(ctypes.c_uint64(b.address))
        else:
            values.append(pack_scalar(b.param.dtype, b.value))
    lp = _LaunchParams(values)
    if values:
        lp.array = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
    return lp


def _pack_raw(args: Sequence[Any]) -> _LaunchParams:
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
    lp = _LaunchParams(bound)
    if bound:
        lp.array = (ctypes.c_void_p * len(bound))(*[ctypes.addressof(v) for v in bound])
    return lp


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
      `_accepted_codes`), `is_contiguous()`, `data_ptr()` aligned (`required_align`);
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
        # PyTorch's current stream, as `_torch_current_stream` reads it
        self.raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self.current_device = getattr(torch._C, "_cuda_getDevice", None)
        if self.current_device is None:
            self.raw_stream = None
        self.drv = _driver()
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
                codes = _accepted_codes(p.dtype)
                dtypes = {getattr(torch, name): _itemsize(code)
                          for name, code in _TORCH_DTYPES.items()
                          if code in codes and hasattr(torch, name)}
                self.params.append(("p", dtypes, p.required_align))
                fmt += "Q"
            else:
                code, convert = scalar_slot(p.dtype)
                fmt += code + ("4x" if code in "fiI" else "")  # 8-byte slots
                if p.dtype.is_float:
                    self.params.append(("f", p.dtype.max, convert))
                else:
                    self.params.append(("i", *_int_range(p.dtype)))
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
            _call(f"cuLaunchKernel({kernel.name})", result)
        return True


class Kernel:
    """A kernel function of a loaded module."""

    def __init__(self, module: Module, handle: Any, name: str,
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
        drv = _driver()
        attr = getattr(drv.CUfunction_attribute, name)
        return int(_call(f"cuFuncGetAttribute({name})", drv.cuFuncGetAttribute(attr, self.handle)))

    def __call__(self, *args: Any, grid: int | Sequence[int] | None = None,
                 stream: Any = None) -> None:
        """Launch with the signature's grid and block size and the module's shared bytes.

        Torch tensors and Python scalars of sizes launched before take `_TorchFastPath`
        (the same checks, ~10 us instead of ~75); anything else, or anything it
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
            grid = self._grids.get(key) or self.signature.grid_of(bound)
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
            self._launch_packed(grid, block, shared_bytes, _pack_raw(args), [], stream)

    def _launch_bound(self, grid: int | Sequence[int], block: int | Sequence[int],
                      shared_bytes: int, bound: Sequence[BoundPointer | BoundScalar],
                      stream: Any) -> None:
        params = _pack(bound)
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
                       shared_bytes: int, params: _LaunchParams,
                       pointers: Sequence[BoundPointer], stream: Any) -> None:
        grid3 = _dim3(grid, "grid")
        block3 = _dim3(block, "block")
        for axis, (n, most) in enumerate(zip(grid3, _MAX_GRID)):
            if n > most:
                raise ArgumentValueError(f"grid dimension {axis} is {n}, more than {most}")
        threads = math.prod(block3)
        if threads == 0 or threads > 1024:
            raise ArgumentValueError(f"block {block3} has {threads} threads (1 to 1024)")
        handle = resolve_stream(stream)
        ctx = ensure_context()
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
        drv = _driver()
        _call(f"cuLaunchKernel({self.name})", drv.cuLaunchKernel(
            self.handle, *grid3, *block3, shared_bytes, handle, params.address, 0))

    def _set_shared(self, shared_bytes: int, ctx: Context) -> None:
        if shared_bytes <= self._dynamic_limit:
            return
        static = self.attribute("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES")
        optin = _attribute("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", ctx.device)
        if static + shared_bytes > optin:
            raise ArgumentValueError(
                f"kernel {self.name}: {shared_bytes} bytes of dynamic shared memory plus "
                f"{static} static exceed the device's {optin} bytes per block")
        drv = _driver()
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _call("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
              drv.cuFuncSetAttribute(self.handle, attr, shared_bytes))
        self._dynamic_limit = shared_bytes

    def _check_pointers(self, pointers: Sequence[BoundPointer], ctx: Context) -> None:
        """Each pointer is device memory of the context's device (the driver knows)."""
        drv = _driver()
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
                        f"device memory ({_name(drv, err)})")
                device = int(value)
            if device != ctx.device:
                raise ArgumentTypeError(
                    f"kernel {sig_name}: argument {b.param} is on cuda:{device}, but the kernel "
                    f"runs on cuda:{ctx.device}")
