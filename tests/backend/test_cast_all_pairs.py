"""`cast` between every pair of the 51 register types (every 1..8-bit type, int16/32,
uint16/32, f16, bf16, f32): it compiles, and it computes what the interpreter computes.

* Compiles: a cast program per pair, built through the frontend (load, cast, store;
  sub-byte tiles through a byte view), goes through the passes and codegen to LLVM IR
  that LLVM's verifier accepts, never another exception. CI runs a fixed sample of
  the 2,601 pairs; `HYPOTHESIS_PROFILE=thorough` runs them all, to PTX for sm_80 and
  sm_90a.
* Agrees: the cast's per-value conversion (`arith.convert_value`, what `lower_cast`
  emits) is compiled for this CPU (tests/host_jit.py) and run on every code of every
  <= 8-bit source, and on sampled codes of the wider ones (ties of every low-bit
  format, one f32 ulp either side, powers of two and their neighbours, random codes;
  every 16-bit code under the thorough profile). The reference is the interpreter's
  own rule, `round_to` of the source's values (`dtypes.encode`: RNE, saturation or
  inf): the same code bit for bit, but for a NaN of a 16/32-bit float (any NaN), and
  the codes the interpreter rejects (NaN into a type without NaN) are not compared.
"""

from __future__ import annotations

import ctypes
import os

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest
from host_jit import compile_for_host, counted_loop, host_module

import tilevm as tv
from tilevm import dtypes
from tilevm.backend.llvm import codegen
from tilevm.backend.llvm.arith import convert_value
from tilevm.backend.llvm.bits import from_bits, to_bits
from tilevm.backend.pipeline import compile_program, run_passes
from tilevm.layouts import local
from tilevm.vm.interp_values import decode_codes, to_codes

THOROUGH = os.environ.get("HYPOTHESIS_PROFILE") == "thorough"
TYPES = [*dtypes.lowbit_dtypes(), *(dtypes.parse(n) for n in
                                    ("int16", "uint16", "int32", "uint32", "f16", "bf16", "f32"))]
PAIRS = [(s, d) for s in TYPES for d in TYPES]
I32 = ir.IntType(32)


# pairs that failed once (invalid LLVM IR, a crash, a wrong rounding), always sampled
KNOWN = [tuple(dtypes.parse(n) for n in pair) for pair in (
    ("int32", "f8e4m3"), ("uint1", "f4e2m1"), ("f8e4m3", "int4"), ("f6e5m0", "f16"),
    ("uint32", "bf16"), ("int32", "f8e7m0"), ("f32", "f4e2m1"), ("int8", "uint8"),
    ("f32", "int3"), ("f16", "f8e5m2"), ("bf16", "f8e4m3"), ("f8e5m2", "f8e4m3"))]


def _sample(pairs: list, count: int, seed: int) -> list:
    """A fixed sample of `pairs` that meets every type as a source and as a target."""
    rng = np.random.default_rng(seed)
    chosen = set(KNOWN)
    chosen |= {(s, TYPES[(i * 7 + 3) % len(TYPES)]) for i, s in enumerate(TYPES)}
    chosen |= {(TYPES[(i * 11 + 5) % len(TYPES)], d) for i, d in enumerate(TYPES)}
    rest = [p for p in pairs if p not in chosen]
    chosen |= {rest[i] for i in rng.choice(len(rest), max(0, count - len(chosen)), False)}
    return [p for p in pairs if p in chosen]


# ---- every pair compiles ---------------------------------------------------------------

T0 = 8  # rows; 4 threads a row, 8 elements a thread


def _layout(n: int):
    return local(1, 1).spatial(T0, 4).local(1, n)


def cast_program(src, dst):
    """`y = cast(x, dst)` of a [8, 32] tile; sub-byte tiles are loaded and stored as
    bytes and viewed as codes."""
    sv, dv = getattr(tv, src.name), getattr(tv, dst.name)
    sub_src, sub_dst = src.bits < 8, dst.bits < 8

    @tv.kernel(num_warps=1)
    def cast_tile(x: tv.ptr(tv.uint8 if sub_src else sv, const=True),
                  y: tv.ptr(tv.uint8 if sub_dst else dv)):
        if sub_src:
            gx = tv.global_view(x, [T0, 4 * src.bits])
            packed = tv.load_global(gx, [0, 0], [T0, 4 * src.bits], layout=_layout(src.bits))
            tile = tv.view(packed, sv, [T0, 32], _layout(8))
        else:
            tile = tv.load_global(tv.global_view(x, [T0, 32]), [0, 0], [T0, 32],
                                  layout=_layout(8))
        out = tv.cast(tile, dv)
        if sub_dst:
            gy = tv.global_view(y, [T0, 4 * dst.bits])
            tv.store_global(gy, tv.view(out, tv.uint8, [T0, 4 * dst.bits],
                                        _layout(dst.bits)), [0, 0])
        else:
            tv.store_global(tv.global_view(y, [T0, 32]), out, [0, 0])

    cast_tile.name = f"cast_{src.name}_{dst.name}"
    return cast_tile.specialize()


COMPILE_PAIRS = PAIRS if THOROUGH else _sample(PAIRS, 120, 44)


@pytest.mark.parametrize("src, dst", COMPILE_PAIRS,
                         ids=[f"{s}-{d}" for s, d in COMPILE_PAIRS])
def test_cast_compiles_to_valid_llvm_ir(src, dst):
    program = cast_program(src, dst)
    if THOROUGH:
        for arch in ("sm_80", "sm_90a"):
            assert ".entry" in compile_program(program, arch).ptx
        return
    text = str(codegen.generate(run_passes(program, arch="sm_80")))
    llvm.parse_assembly(text).verify()


# ---- every pair agrees with the interpreter, on the CPU --------------------------------

def _ties_and_neighbours() -> np.ndarray:
    """f32 codes of every value of every low-bit float and int, the midpoints between
    neighbours (the ties), one f32 ulp either side of each, and both signs."""
    values = [np.arange(-300, 300, dtype=np.float64)]
    for t in dtypes.lowbit_dtypes():
        if t.is_float:
            v = np.unique(dtypes.decode(np.arange(t.num_codes), t))
            v = v[np.isfinite(v)]
            values += [v, (v[1:] + v[:-1]) / 2, 2 * v[-1:] - v[-2:-1] / 2]
    f = np.concatenate(values).astype(np.float32)
    f = np.concatenate([f, -f])
    bits = f.view(np.uint32)
    return np.unique(np.concatenate([bits, bits + 1, bits - 1]))


def _source_codes(src) -> np.ndarray:
    """The codes run for a source (uint32; uint64 for no type here)."""
    if src.bits <= 8 or (src.bits == 16 and THOROUGH):
        return np.arange(src.num_codes, dtype=np.uint32)
    rng = np.random.default_rng(src.bits)
    powers = np.array([(k << j) + d for j in range(32) for k in (1, 3, 5, 7)
                       for d in (-1, 0, 1)], dtype=np.int64)
    edges = np.concatenate([powers, -powers, [0, 1, 2**31 - 1, 2**31, 2**32 - 1]])
    if src.is_float:
        special = {16: [0x7C00, 0xFC00, 0x7E00, 0x7C01, 0x8000, 0x0001, 0x7BFF],
                   32: [0x7F800000, 0xFF800000, 0x7FC00000, 0x80000000, 1, 0x7F7FFFFF]}
        extra = special[src.bits]
        if src.bits == 32:
            extra = np.concatenate([extra, _ties_and_neighbours()])
        elif src.name == "f16":
            extra = np.concatenate([extra, _ties_and_neighbours_as(src)])
        else:
            extra = np.concatenate([extra, _ties_and_neighbours() >> 16])
    else:
        extra = edges
    codes = np.concatenate([rng.integers(0, src.num_codes, 4096), np.asarray(extra)])
    return np.unique(codes.astype(np.int64) % src.num_codes).astype(np.uint32)


def _ties_and_neighbours_as(src) -> np.ndarray:
    """The f32 ties of `_ties_and_neighbours` that f16 holds, and their f16 neighbours."""
    f = _ties_and_neighbours().view(np.float32)
    with np.errstate(over="ignore"):
        h = f.astype(np.float16)
    bits = h[h.astype(np.float32) == f].view(np.uint16).astype(np.int64)
    return np.unique(np.concatenate([bits, bits + 1, bits - 1])) % src.num_codes


AGREE_PAIRS = PAIRS if THOROUGH else _sample(PAIRS, 600, 51)


def _name(src, dst) -> str:
    return f"cast_{src.name}_{dst.name}"


@pytest.fixture(scope="module")
def cast_jit():
    """`void f(ptr codes, ptr out, i32 n)` per pair: out[i] = to_bits(convert_value(
    from_bits(codes[i]))) as i32 codes."""
    module = host_module("casts")
    for src, dst in AGREE_PAIRS:
        def element(b, i, inp, out, src=src, dst=dst):
            code = b.load(b.gep(inp, [i], source_etype=I32), typ=I32)
            value = convert_value(b, from_bits(b, code, src), src, dst)
            b.store(b.trunc(to_bits(b, value, dst), I32) if dst.bits > 32 else
                    to_bits(b, value, dst), b.gep(out, [i], source_etype=I32))
        counted_loop(module, _name(src, dst), element)
    engine = compile_for_host(module)
    proto = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)

    def run(src, dst, codes: np.ndarray) -> np.ndarray:
        fn = proto(engine.get_function_address(_name(src, dst)))
        codes = np.ascontiguousarray(codes, dtype=np.uint32)
        out = np.zeros(codes.size, np.uint32)
        fn(codes.ctypes.data, out.ctypes.data, codes.size)
        return out

    run.engine = engine  # keep the engine alive with the fixture
    return run


def _float_nan(codes: np.ndarray, dtype) -> np.ndarray:
    return np.isnan(dtypes.decode(codes, dtype)) if dtype.is_float else \
        np.zeros(codes.shape, bool)


def test_every_code_of_every_pair_agrees_with_the_interpreter(cast_jit):
    failures = []
    for src, dst in AGREE_PAIRS:
        codes = _source_codes(src)
        values = decode_codes(codes, src)
        keep = ~np.isnan(values) | dst.has_nan  # the interpreter rejects the others
        codes, values = codes[keep], values[keep]
        want = to_codes(values, dst).astype(np.uint32)
        got = cast_jit(src, dst, codes)
        same = got == want
        if dst.is_float and not dst.is_lowbit:  # any NaN for a NaN
            same |= _float_nan(got, dst) & _float_nan(want, dst)
        if not same.all():
            i = np.flatnonzero(~same)[0]
            failures.append(f"{src} -> {dst}: {(~same).sum()} of {same.size} differ; code "
                            f"{int(codes[i]):#x} ({values[i]!r}) gives {int(got[i]):#x}, "
                            f"the interpreter {int(want[i]):#x}")
    assert not failures, "\n".join(failures[:40]) + f"\n({len(failures)} pairs)"
