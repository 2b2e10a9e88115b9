"""Literal constants: one rule (`dtypes.constants`) for the frontend, the verifier, the
interpreter and the compiled code, checked against codes derived by hand from the
formats (IEEE 754 binary16, bfloat16, binary32; OCP FP8 E4M3 and E5M2); and the
compiled integer floor division and modulo, run on the CPU (tests/host_jit.py) against
Python's `//` and `%`."""

import ctypes
import math
import re
from functools import cache

import llvmlite.ir as ir
import numpy as np
import pytest
from host_jit import compile_for_host, host_module

from tilevm.backend.llvm.arith import scalar_binary
from tilevm.backend.llvm.types import llvm_constant
from tilevm.backend.pipeline import compile_program
from tilevm.dtypes import DTypeError, decode, host_dtype, parse
from tilevm.dtypes.constants import literal_code, literal_value
from tilevm.ir.builder import Builder
from tilevm.ir.errors import VMError
from tilevm.ir.evaluate import evaluate
from tilevm.ir.expr import Const
from tilevm.ir.verifier import verify
from tilevm.layouts import spatial
from tilevm.vm import lang as tv

NAN, INF = math.nan, math.inf

# (type, literal, its code): the examples first (each crashed the compiler).
HELD = [
    ("f16", 1e10, 0x7C00),      # past 65504 (and its rounding half-way point): +inf
    ("bf16", 0.1, 0x3DCD),      # 0x3DCCCCCD in binary32, rounded to nearest: 0x3DCD
    ("f8e4m3", NAN, 0x7F),      # E4M3 has one NaN per sign: S.1111.111
    ("f8e4m3", INF, 0x7E),      # no inf in E4M3: saturates to 448 = S.1111.110
    ("f16", -1e10, 0xFC00),
    ("f16", 65519.0, 0x7BFF),   # below the half-way point to 2^16: 65504
    ("f16", 65520.0, 0x7C00),   # the half-way point: ties to even, i.e. inf
    ("f16", NAN, 0x7E00),       # the quiet NaN
    ("bf16", -0.0, 0x8000),
    ("f32", 1e300, 0x7F800000),
    ("f32", 0.1, 0x3DCCCCCD),
    ("f8e4m3", -1000.0, 0xFE),  # saturates to -448
    ("f8e5m2", 1e6, 0x7C),      # E5M2 is IEEE-like: +inf
    ("f8e5m2", NAN, 0x7E),
    ("int8", -5, 0xFB),
    ("uint8", 255, 0xFF),
]
# (type, literal): no value of the type (the rule's errors).
NO_VALUE = [("int8", 300), ("int8", -129), ("uint8", -1), ("int32", 2**31), ("int8", 2.0),
            ("f6e3m2", NAN), ("int4", 8)]


@cache
def fill_kernel(dtype: str):
    @tv.kernel(num_warps=1)
    def fill(y: tv.ptr(dtype), *, value: float = 0.0):
        gy = tv.global_view(y, [32])
        tv.store_global(gy, tv.full([32], value, dtype), [0])

    return fill


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype, literal, code", HELD[:4] + [("f32", 0.1, 0x3DCCCCCD),
                                                             ("int8", -5, 0xFB)], ids=str)
def test_constants_compile_to_the_interpreters_bits(dtype, literal, code, arch):
    kernel = fill_kernel(dtype)
    out = np.zeros(32, host_dtype(dtype))
    kernel.interpret(out, value=literal)
    stored = re.findall(r"st\.global\.b\d+\s+\[[^\]]+\],\s*(\w+);",
                        compile_program(kernel.specialize(value=literal), arch).ptx)
    assert len(stored) == 1 and int(stored[0], 0) == code  # one store, of the constant
    assert np.all(out.view(f"u{out.itemsize}") == code)


@pytest.mark.parametrize("dtype, literal, code", HELD, ids=str)
def test_the_rule_holds_every_literal_by_its_code(dtype, literal, code):
    held = literal_value(literal, dtype)
    assert literal_code(literal, dtype) == code
    want = decode(code, dtype)
    assert (math.isnan(held) and np.isnan(want)) or held == want
    assert math.copysign(1, held) == math.copysign(1, want)
    interpreted = evaluate(Const(literal, parse(dtype)), lambda v: None)
    assert interpreted == held or math.isnan(interpreted) and math.isnan(held)


def test_emitted_constants_have_the_rules_bits():
    """Every held literal through `llvm_constant`, compiled for this CPU: its bits."""
    module = host_module("constants")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType()]), "consts")
    b = ir.IRBuilder(fn.append_basic_block())
    i64 = ir.IntType(64)
    for k, (dtype, literal, _) in enumerate(HELD):
        value = llvm_constant(literal, parse(dtype))
        if not isinstance(value.type, ir.IntType):
            value = b.bitcast(value, ir.IntType(parse(dtype).bits))
        b.store(b.zext(value, i64), b.gep(fn.args[0], [i64(k)], source_etype=i64))
    b.ret_void()
    engine = compile_for_host(module)
    out = np.zeros(len(HELD), np.uint64)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(engine.get_function_address("consts"))(
        out.ctypes.data)
    assert out.tolist() == [code for _, _, code in HELD]


@pytest.mark.parametrize("dtype, literal", NO_VALUE, ids=str)
def test_a_literal_the_type_cannot_hold_is_an_error_everywhere(dtype, literal):
    with pytest.raises(DTypeError):
        literal_value(literal, dtype)
    with pytest.raises(DTypeError):
        llvm_constant(literal, parse(dtype))
    with pytest.raises(VMError, match="constant"):
        evaluate(Const(literal, parse(dtype)), lambda v: None)
    b = Builder("k", num_warps=1)
    b.full(Const(literal, parse(dtype)), dtype, [32], layout=spatial(32))
    with pytest.raises(VMError, match=f"full: constant {re.escape(repr(literal))} in value"):
        verify(b.build())


def test_the_frontend_rejects_an_integer_out_of_range_at_its_line():
    # the example: the verifier rejected it, the interpreter wrapped it to 44
    with pytest.raises(VMError, match=r"the constant 300 does not fit int8 \(\[-128, 127\]\)") \
            as err:
        fill_kernel("int8").specialize(value=300)
    assert err.value.loc is not None and err.value.loc.file == __file__
    assert "tv.full([32], value, dtype)" in str(err.value)


def test_load_globals_other_is_a_constant_of_the_tiles_type():
    @tv.kernel(num_warps=1)
    def load(x: tv.ptr("int8"), *, other: int = 0):
        gx = tv.global_view(x, [32])
        tv.store_global(gx, tv.load_global(gx, [8], [32], other=other), [0])

    with pytest.raises(VMError, match="the constant 300 does not fit int8") as err:
        load.specialize(other=300)  # the compiled code had 44 here, the interpreter 127
    assert err.value.loc is not None and "other=other" in str(err.value)
    x = np.arange(32, dtype=np.int8)
    load.interpret(x, other=-128)
    assert x.tolist() == list(range(8, 32)) + [-128] * 8


# ---- integer floor division and modulo ------------------------------------------------------

def _division_jit(dtype):
    """`void div(ptr xy, ptr out, i32 n)`: out[3i..3i+2] = x // y, x % y, cdiv(x, y) of
    the pair xy[2i], xy[2i+1], by the backend's `scalar_binary` on `dtype`."""
    module = host_module("division")
    ty = ir.IntType(dtype.bits)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType()] * 2
                                             + [ir.IntType(32)]), "div")
    xy, out, n = fn.args
    entry, loop, done = (fn.append_basic_block(x) for x in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(ir.IntType(32))
    i.add_incoming(ir.IntType(32)(0), entry)
    x = b.load(b.gep(xy, [b.mul(i, ir.IntType(32)(2))], source_etype=ty), typ=ty)
    y = b.load(b.gep(xy, [b.add(b.mul(i, ir.IntType(32)(2)), ir.IntType(32)(1))],
                     source_etype=ty), typ=ty)
    for j, op in enumerate(("//", "%", "cdiv")):
        slot = b.add(b.mul(i, ir.IntType(32)(3)), ir.IntType(32)(j))
        b.store(scalar_binary(b, op, x, y, dtype), b.gep(out, [slot], source_etype=ty))
    nxt = b.add(i, ir.IntType(32)(1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    engine = compile_for_host(module)
    call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)(
        engine.get_function_address("div"))
    call.engine = engine
    return call


@pytest.mark.parametrize("name", ["int8", "int32", "uint8"])
def test_compiled_floor_division_and_modulo_match_python(name):
    dtype = parse(name)
    lo, hi = int(dtype.min_exact), int(dtype.max_exact)
    if dtype.bits == 8:  # every pair
        x, y = (a.ravel() for a in np.meshgrid(np.arange(lo, hi + 1), np.arange(lo, hi + 1)))
    else:
        rng = np.random.default_rng(44)
        edges = np.array([lo, lo + 1, -7, -2, -1, 1, 2, 7, hi - 1, hi])
        x = np.concatenate([np.repeat(edges, edges.size), rng.integers(lo, hi, 20_000)])
        y = np.concatenate([np.tile(edges, edges.size), rng.integers(-100, 100, 20_000)])
    storage = np.dtype(f"{'i' if dtype.is_signed else 'u'}{dtype.bits // 8}")
    pairs = np.stack([x, y], axis=1).astype(storage)
    out = np.zeros(3 * x.size, storage)
    # y = 0 gives an unspecified value (the interpreter rejects it), but must not trap
    _division_jit(dtype)(pairs.ctypes.data, out.ctypes.data, x.size)
    keep = y != 0
    got = out.reshape(-1, 3)[keep].astype(np.int64)
    xs, ys = x[keep].astype(object), y[keep].astype(object)

    def wrapped(values):  # into [lo, hi], two's complement: lo // -1 is lo
        return ((values - lo) % (hi - lo + 1) + lo).astype(np.int64)

    assert np.array_equal(got[:, 0], wrapped(xs // ys))
    assert np.array_equal(got[:, 1], wrapped(xs % ys))
    assert np.array_equal(got[:, 2], wrapped(-(-xs // ys)))
