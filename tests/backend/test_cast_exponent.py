"""`cast` with an `exponent`: 1..8-bit codes -> `value * 2^exponent`, rounded once. Where
the exponent cancels a low-bit float's re-bias (`conversions.takes_exponent`) the paired
conversion has no float op at all (the decode kernel's f16 path); elsewhere the value
goes through f32. Interpreter, IR text, verifier and frontend errors, and the lowering
(PTX float ops; a host JIT, bit for bit against `decode`) on the CPU; the quantized
matmul GPU tests cover the kernel."""

import ctypes
import re

import llvmlite.ir as ir
import numpy as np
import pytest
from host_jit import compile_for_host, counted_loop, host_module

from tilevm.backend.llvm.arith import convert_packed
from tilevm.backend.pipeline import compile_program
from tilevm.dtypes import conversion as rules
from tilevm.dtypes import decode, encode, lowbit_dtypes, pack, parse
from tilevm.ir.builder import Builder
from tilevm.ir.errors import VMError
from tilevm.ir.parser import parse_program
from tilevm.ir.printer import format_program
from tilevm.ir.verifier import verify
from tilevm.layouts import local, spatial
from tilevm.vm import lang as tv

I16, I32 = ir.IntType(16), ir.IntType(32)
F16, BF16, F32 = parse("f16"), parse("bf16"), parse("f32")


def cast_kernel(wdtype, dst, exponent: int):
    """Each of 32 threads views its `b` bytes as 8 codes and casts them with `exponent`."""
    b = wdtype.bits

    @tv.kernel(num_warps=1)
    def cast_codes(w: tv.ptr(tv.uint8, const=True), out: tv.ptr(dst)):
        gw, go = tv.global_view(w, [8, 4 * b]), tv.global_view(out, [8, 32])
        packed = tv.load_global(gw, [0, 0], [8, 4 * b],
                                layout=local(1, 1).spatial(8, 4).local(1, b))
        codes = tv.view(packed, wdtype, [8, 32], local(1, 1).spatial(8, 4).local(1, 8))
        tv.store_global(go, tv.cast(codes, dst, exponent=exponent), [0, 0])

    cast_codes.name = f"cast_{wdtype}_{dst}"
    return cast_codes


def want(codes: np.ndarray, src, dst, exponent: int) -> np.ndarray:
    """The codes' values times 2^exponent, rounded once to dst (float64)."""
    return decode(encode(np.ldexp(decode(codes, src), exponent), dst), dst)


@pytest.mark.parametrize("src, exponent", [("f6e3m2", -12), ("f4e2m1", -14), ("int3", 5),
                                           ("f8e4m3", -20), ("uint8", -3)])
def test_interpreter_scales_then_rounds_once(src, exponent):
    src = parse(src)
    codes = np.arange(256).reshape(8, 32) % (1 << src.bits)
    w = np.stack([pack(row, src.bits) for row in codes]).astype(np.uint8)
    out = np.zeros((8, 32), np.float16)
    cast_kernel(src, F16, exponent).interpret(w, out)
    got = out.astype(np.float64)
    assert np.array_equal(got, want(codes, src, F16, exponent), equal_nan=True)


def test_ir_text_shows_a_nonzero_exponent_only():
    b = Builder("k", num_warps=1)
    x = b.full(1, "int4", [32], layout=spatial(32))
    b.cast(x, "f16", exponent=-3)
    b.cast(x, "f16")
    text = format_program(b.build())
    assert len(re.findall(r"= cast src=%\w+, exponent=-3 :", text)) == 1
    assert len(re.findall(r"= cast src=%\w+ :", text)) == 1
    assert format_program(parse_program(text)) == text


@pytest.mark.parametrize("src, dst, message", [
    ("int32", "f32", "1..8-bit source"), ("int4", "int8", "float out")])
def test_verifier_needs_codes_into_a_float(src, dst, message):
    b = Builder("k", num_warps=1)
    b.cast(b.full(1, src, [32], layout=spatial(32)), dst, exponent=2)
    with pytest.raises(VMError, match=message):
        verify(b.build())


def test_frontend_error():
    @tv.kernel(num_warps=1)
    def wide(y: tv.ptr(tv.f32)):
        x = tv.full([32], 1, tv.int32, layout=spatial(32))
        tv.store_global(tv.global_view(y, [32]), tv.cast(x, tv.f32, exponent=1), [0])

    with pytest.raises(VMError, match="1..8-bit codes into a float"):
        wide.specialize()


def _float_ops(ptx: str) -> list[str]:
    return re.findall(r"\b(?:mul|add|sub|fma)\.rn\.\w+", ptx)


@pytest.mark.parametrize("src, dst", [("f6e3m2", "f16"), ("f4e2m1", "f16"),
                                      ("f8e4m3", "f16"), ("f3e1m1", "f16")])
def test_cancelled_rebias_leaves_no_float_op(src, dst):
    src, dst = parse(src), parse(dst)
    rebias = rules.conversion_rule(src, dst).scale_exponent
    plain = compile_program(cast_kernel(src, dst, 0).specialize(), "sm_90").ptx
    cancelled = compile_program(cast_kernel(src, dst, -rebias).specialize(), "sm_90").ptx
    assert len(_float_ops(plain)) == 4  # 8 codes a thread: 4 pairs, one mul.f16x2 each
    assert _float_ops(cancelled) == []


def test_takes_exponent():
    assert rules.takes_exponent("f6e3m2", "f16", -12) and rules.takes_exponent("int4", "f16", 0)
    assert not rules.takes_exponent("int4", "f16", 1)  # the integer rule has no multiply
    assert not rules.takes_exponent("f4e2m1", "f32", -1)  # f32 pairs: two scalar ops
    assert not rules.takes_exponent("f6e3m2", "f16", -40)  # 2^-28 is no f16 value
    assert not rules.takes_exponent("f6e5m0", "f16", -1)  # inexact: made in f32


CASES = [(s, d, k) for s in lowbit_dtypes() for d in (F16, BF16)
         for k in (-rules.conversion_rule(s, d, allow_rounding=True).scale_exponent, 3)
         if rules.is_exact(s, d)]


@pytest.fixture(scope="module")
def scaled_jit():
    module = host_module("cast_exponent")
    for src, dst, k in CASES:
        def record(b, i, src_p, dst_p, src=src, dst=dst, k=k):
            words = [b.load(b.gep(src_p, [b.add(b.mul(i, I32(src.bits)), I32(j))],
                                  source_etype=I32), typ=I32) for j in range(src.bits)]
            for j, value in enumerate(convert_packed(b, words, 32, src, dst, k)):
                at = b.add(b.mul(i, I32(32)), I32(j))
                b.store(b.bitcast(value, I16), b.gep(dst_p, [at], source_etype=I16))
        counted_loop(module, f"scaled_{src.name}_{dst.name}_{k}".replace("-", "m"), record)
    return compile_for_host(module)


@pytest.mark.parametrize("src, dst, k", CASES, ids=[f"{s}-{d}-{k}" for s, d, k in CASES])
def test_packed_cast_with_exponent_is_exact(scaled_jit, src, dst, k):
    codes = np.arange(1 << max(src.bits, 5)).reshape(-1, 32) % (1 << src.bits)
    records = np.stack([pack(row, src.bits) for row in codes]).view(np.uint32)
    out = np.zeros((len(records), 32), np.uint16)
    name = f"scaled_{src.name}_{dst.name}_{k}".replace("-", "m")
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)(
        scaled_jit.get_function_address(name))
    records = np.ascontiguousarray(records)
    fn(records.ctypes.data, out.ctypes.data, len(records))
    with np.errstate(invalid="ignore"):  # a NaN pattern may be a signaling one
        got = out.view(np.float16).astype(np.float64) if dst == F16 else \
            (out.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    expected = want(codes, src, dst, k)
    assert np.array_equal(got, expected, equal_nan=True)
    number = ~np.isnan(expected)  # (a NaN's sign is not a value)
    assert np.array_equal(np.signbit(got[number]), np.signbit(expected[number]))
