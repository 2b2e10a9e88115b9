"""The LLVM types of the backend and small builders shared by every emitter: the LLVM
type of a dtype's register value, constants, integer and pointer types, vectors,
intrinsics."""

from __future__ import annotations

import llvmlite.ir as ir

from tilevm.backend.llvm.conversion import float_ir_type
from tilevm.dtypes import DataType
from tilevm.dtypes.constants import literal_code, literal_value

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
PTR = ir.PointerType()


def llvm_type(dtype: DataType) -> ir.Type:
    """The LLVM type of one element held in a register (sub-byte codes as i8)."""
    if dtype.is_float and dtype.bits >= 16:
        return float_ir_type(dtype)
    if dtype.is_float:  # 8-bit and narrower floats are held as their codes
        return I8
    return ir.IntType(max(dtype.bits, 8) if dtype.bits > 1 else 1)


def llvm_constant(value: int | float | bool, dtype: DataType) -> ir.Constant:
    """A literal of `dtype` as the value the rule for constants gives it
    (`dtypes.constants`, as the verifier and the interpreter read it; a `DTypeError` where
    it holds none): integers and the codes of 8-bit and narrower floats as their bits;
    f16, bf16 and f32 as the rounded value, which each holds exactly (inf past the
    largest finite value of an IEEE format, the format's NaN), so llvmlite writes it
    without rounding again."""
    held = literal_value(value, dtype)
    ty = llvm_type(dtype)
    if isinstance(ty, ir.IntType):
        return ir.Constant(ty, literal_code(held, dtype))
    return ir.Constant(ty, held)


def ty_bytes(ty: ir.Type) -> int:
    if isinstance(ty, ir.IntType):
        return ty.width // 8
    return {"half": 2, "bfloat": 2, "float": 4, "double": 8}[str(ty)]


def build_vector(b: ir.IRBuilder, parts: list[ir.Value], ty: ir.VectorType) -> ir.Value:
    vec = ir.Constant(ty, ir.Undefined)
    for i, part in enumerate(parts):
        vec = b.insert_element(vec, part, ir.Constant(I32, i))
    return vec


def intrinsic(b: ir.IRBuilder, name: str, ret: ir.Type, args: list[ir.Type],
              params: list[ir.Type] | None = None) -> ir.Function:
    """The overloaded intrinsic `name.<suffix of args>`; `params` are its parameter types
    when they are not `args` (e.g. `llvm.maximum.f32` takes two floats)."""
    module = b.module
    suffix = ".".join(_type_suffix(t) for t in ([ret] if name.endswith("sat") else [])
                      + args)
    full = f"{name}.{suffix}"
    fn = module.globals.get(full)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args if params is None else params), full)
    return fn


def _type_suffix(t: ir.Type) -> str:
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{_type_suffix(t.element)}"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    return {"half": "f16", "float": "f32", "double": "f64", "bfloat": "bf16"}[str(t)]

