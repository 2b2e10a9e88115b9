"""`cast` of low-bit codes to f16/bf16 converts two codes at a time, straight out of
the packed words low-bit tiles live in (`arith.convert_packed`: one lanes word,
`conversion.emit_convert_pair`, one `<2 x half|bfloat>` float op). CPU: the cast's
LLVM IR and PTX use the paired form for every exact (low-bit type, f16/bf16) pair; a
CPU JIT checks, for every pair of codes, that it is bit-identical to the per-element
`convert_value`. GPU (marked `gpu`): the kernel against the interpreter (the dequantize
and quantized matmul GPU tests of test_backend_reduce_view.py and test_backend_convert.py
cover the rest)."""

from __future__ import annotations

import ctypes
import re

import llvmlite.ir as ir
import numpy as np
import pytest
from host_jit import compile_for_host, counted_loop, host_module
from kernel_harness import run_both

import tilevm as tv
from tilevm.backend.llvm import conversion as cv
from tilevm.backend.llvm.arith import convert_packed, convert_value
from tilevm.backend.llvm.bits import extract_bits, from_bits
from tilevm.backend.pipeline import compile_program
from tilevm.dtypes import conversion as rules
from tilevm.dtypes import decode, lowbit_dtypes, pack, packed_size, parse
from tilevm.dtypes.conversion import lane_pairs, pairs_convert
from tilevm.layouts import local

SOURCES = list(lowbit_dtypes())
TARGETS = (parse("f16"), parse("bf16"))
EXACT = [(s, d) for s in SOURCES for d in TARGETS if rules.is_exact(s, d)]
I8, I16, I32, I64 = (ir.IntType(n) for n in (8, 16, 32, 64))


def make_cast(wdtype, dst, num_warps: int = 1):
    """`out[R, 8*T] = dst(w)`: `w` is b-bit codes packed in bytes `[R, T*b]`; each thread
    holds one row-run of b bytes, viewed as 8 codes (4 pairs), cast to dst."""
    b = wdtype.bits

    @tv.kernel(num_warps=num_warps)
    def cast_codes(w: tv.ptr(tv.uint8, const=True), out: tv.ptr(dst), R: tv.int32):
        t0 = num_warps * 32 // 4
        tv.grid(tv.cdiv(R, t0))
        gw = tv.global_view(w, [R, 4 * b])
        go = tv.global_view(out, [R, 32])
        r0 = tv.block_idx(0) * t0
        packed = tv.load_global(gw, [r0, 0], [t0, 4 * b],
                                layout=local(1, 1).spatial(t0, 4).local(1, b))
        codes = tv.view(packed, wdtype, [t0, 32], local(1, 1).spatial(t0, 4).local(1, 8))
        tv.store_global(go, tv.cast(codes, dst), [r0, 0])

    cast_codes.name = f"cast_{wdtype}_{dst}"
    return cast_codes


def _float_ops(text: str, ty: str) -> tuple[int, int]:
    """(paired, scalar) float ops on `ty` (half or bfloat) in LLVM IR text. A `contract`
    multiply is half of an fma (the `fadd contract` after it counts; PTX checks it)."""
    ops = r"(?:fadd|fsub|fmul(?! contract)|fneg|fptrunc|fpext|sitofp|uitofp)"
    paired = len(re.findall(rf"= {ops} (?:\w+ )*<2 x {ty}>", text))
    scalar = len(re.findall(rf"= {ops} (?:\w+ )*{ty}\b", text))
    return paired, scalar


@pytest.mark.parametrize("src, dst", EXACT, ids=[f"{s}-{d}" for s, d in EXACT])
def test_cast_of_codes_is_paired(src, dst):
    assert pairs_convert(src, dst)
    compiled = compile_program(make_cast(src, dst).specialize(), "sm_90")
    ty = str(cv.float_ir_type(dst))
    paired, scalar = _float_ops(compiled.llvm_ir, ty)
    ops = rules.conversion_rule(src, dst).float_ops  # 0 (f8e5m2 -> f16) or 1 per pair
    assert (paired, scalar) == (4 * ops, 0)  # 8 codes per thread: 4 pairs
    ptx = compiled.ptx
    lanes = "f16x2" if dst.name == "f16" else "bf16x2"
    vector_ops = len(re.findall(rf"\b(?:add|sub|mul|fma)\.rn\.{lanes}\b", ptx))
    scalar_ops = len(re.findall(rf"\b(?:add|sub|mul|fma)\.rn\.{dst.name}\b", ptx))
    assert (vector_ops, scalar_ops) == (4 * ops, 0), ptx
    assert "cvt.rn.f16" not in ptx and "cvt.rn.bf16" not in ptx


@pytest.mark.parametrize("src", [s for s in SOURCES if not rules.is_exact(s, "f16")])
def test_inexact_casts_are_not_paired(src):
    assert not pairs_convert(src, parse("f16")) and pairs_convert(src, parse("bf16"))
    assert not pairs_convert(src, parse("f32"))


COUNTS = (32, 3)  # codes per record: whole blocks of `lane_pairs`, and odd


def _pairing(count: int, bits: int) -> list[tuple[int, ...]]:
    """The codes `convert_packed` converts together (its documented rule)."""
    pairs = lane_pairs(bits, count)
    if pairs is not None:
        return pairs
    return [(l, l + 1) for l in range(0, count - 1, 2)] + ([(count - 1,)] if count % 2 else [])


@pytest.mark.parametrize("bits", range(1, 9))
def test_lane_pairs_put_a_pair_16_bits_apart_in_lanes(bits):
    """Each code once; a pair's bits 16 (mod 32) apart, so that the two sit at one offset
    of a low and a high lane; within one word for b in {1, 2, 4, 8}; whole blocks only."""
    pairs = lane_pairs(bits, 32)
    assert sorted(c for pair in pairs for c in pair) == list(range(32))
    assert all((second - first) * bits % 32 == 16 for first, second in pairs)
    if 16 % bits == 0:
        assert all(first * bits // 32 == second * bits // 32 for first, second in pairs)
    assert lane_pairs(bits, 3) is None


def _records(src, count: int) -> np.ndarray:
    """Packed records of `count` codes such that every (x, y) pair of codes meets in
    some paired conversion (and every code in an odd one): [records, words] uint32."""
    codes = np.arange(1 << src.bits)
    xs, ys = (a.ravel() for a in np.meshgrid(codes, codes, indexing="ij"))
    groups = _pairing(count, src.bits)
    per_record = len(groups)
    n = -(-xs.size // per_record)
    table = np.zeros((n, count), np.int64)
    flat_x, flat_y = np.resize(xs, n * per_record), np.resize(ys, n * per_record)
    for q, group in enumerate(groups):
        table[:, group[0]] = flat_x[q::per_record]
        if len(group) > 1:
            table[:, group[1]] = flat_y[q::per_record]
    words = -(-count * src.bits // 32)
    # A record need not be whole bytes: each is packed on its own, as if padded with zero
    # codes to whole groups of 8 codes (whole bytes), which leaves its own bytes as they
    # are; all records go through one `pack` call that way.
    padded = np.zeros((n, -(-count // 8) * 8), np.int64)
    padded[:, :count] = table
    record_bytes = pack(padded.ravel(), src.bits).reshape(n, -1)[:, :packed_size(count,
                                                                                  src.bits)]
    packed = np.zeros((n, words * 4), np.uint8)
    packed[:, :record_bytes.shape[1]] = record_bytes
    return packed.view(np.uint32), table


def _pair_function(module: ir.Module, src, dst, count: int) -> None:
    """`void f(ptr in, ptr out, i32 n)`: for each of the n records of packed words at
    `in`, `out` gets convert_packed of its `count` codes and then convert_value of each
    code (cut out of the words), as i16 bit patterns."""
    words = -(-count * src.bits // 32)

    def record(b: ir.IRBuilder, i: ir.Value, src_p: ir.Value, dst_p: ir.Value) -> None:
        regs = [b.load(b.gep(src_p, [b.add(b.mul(i, I32(words)), I32(j))],
                             source_etype=I32), typ=I32) for j in range(words)]
        single = [convert_value(b, from_bits(b, extract_bits(b, regs, l * src.bits,
                                                             src.bits), src), src, dst)
                  for l in range(count)]
        results = convert_packed(b, regs, count, src, dst) + single
        for j, value in enumerate(results):
            at = b.add(b.mul(i, I32(2 * count)), I32(j))
            b.store(b.bitcast(value, I16), b.gep(dst_p, [at], source_etype=I16))

    counted_loop(module, f"pairs_{src.name}_{dst.name}_{count}", record)


@pytest.fixture(scope="module")
def pairs_jit():
    module = host_module("cast_pairs")
    for src, dst in EXACT:
        for count in COUNTS:
            _pair_function(module, src, dst, count)
    return compile_for_host(module)


def _as_float(bits: np.ndarray, dst) -> np.ndarray:
    """f16 / bf16 bit patterns (uint16) as float64."""
    if dst.name == "f16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("src, dst", EXACT, ids=[f"{s}-{d}" for s, d in EXACT])
def test_paired_cast_is_bit_identical_to_per_element(pairs_jit, src, dst, count):
    records, codes = _records(src, count)
    out = np.zeros((len(records), 2 * count), np.uint16)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)(
        pairs_jit.get_function_address(f"pairs_{src.name}_{dst.name}_{count}"))
    records = np.ascontiguousarray(records)
    fn(records.ctypes.data, out.ctypes.data, len(records))
    assert np.array_equal(out[:, :count], out[:, count:])  # the same bits as per element
    # and the values decode gives (NaN for NaN; the sign of zero kept)
    as_float = _as_float(out[:, count:], dst)
    want = decode(codes, src)
    assert np.array_equal(as_float, want, equal_nan=True)
    assert np.array_equal(np.signbit(as_float), np.signbit(want))


def test_odd_widths_share_lanes_words():
    """For b in {3, 5, 6, 7} a pair's codes lie in different words: when both lie inside
    their lanes one AND-OR of two words (or, when the first is in a high lane, one funnel
    shift) makes the lanes word, shared by the pairs of the same two words; a pair with a
    code across a lane boundary comes out of two windows (a shift by 16 merges them).
    f6e3m2 -> f16, 32 codes (two blocks of 8 pairs): per block 6 pairs in lanes, served
    by two AND-OR merges and one swap, and 2 pairs out of windows; one float op a pair."""
    src, dst = parse("f6e3m2"), parse("f16")
    module = host_module("lanes")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I32] * src.bits), "f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    values = convert_packed(b, list(fn.args), 32, src, dst)
    b.ret_void()
    text = str(fn)
    assert len(values) == 32
    assert len(re.findall(r"= and i32 .*, 4294901760\b", text)) == 4  # merges' high lanes
    assert len(re.findall(r"= shl i32 .*, 16\b", text)) == 4  # pairs out of windows
    assert _float_ops(text, "half") == (16 * rules.conversion_rule(src, dst).float_ops, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("src, dst", [("int4", "f16"), ("int4", "bf16"), ("uint8", "bf16"),
                                      ("int8", "bf16"), ("f4e2m1", "bf16"),
                                      ("f8e4m3", "bf16"), ("f8e5m2", "f16"),
                                      ("f6e5m0", "bf16"), ("int1", "f16"), ("f3e1m1", "f16")])
def test_gpu_paired_cast_matches_interpreter(src, dst):
    src, dst = parse(src), parse(dst)
    rows = 19
    rng = np.random.default_rng(src.bits)
    codes = rng.integers(0, 1 << src.bits, (rows, 32))
    w = np.stack([pack(row, src.bits) for row in codes]).astype(np.uint8)
    out = np.zeros((rows, 32), np.float16 if dst.name == "f16" else np.uint16)
    got, expected = run_both(make_cast(src, dst), [w, out, rows])
    got_v, want_v = (_as_float(np.asarray(r[1]).view(np.uint16), dst) for r in (got, expected))
    # the same bits, but for a NaN's payload (the interpreter's NaN is numpy's)
    assert np.array_equal(got_v, want_v, equal_nan=True)
    assert np.array_equal(np.signbit(got_v[~np.isnan(got_v)]),
                          np.signbit(want_v[~np.isnan(want_v)]))
