"""Exhaustive CPU-JIT tests of the generic conversion rules (dtypes/conversion.py, as
backend/llvm/conversion.py emits them).

One LLVM module holds a loop function per (source, target, variant); MCJIT compiles it
for this CPU once, and every code of every 1..8-bit format (every pair of codes for the
paired form) is checked bitwise against `dtypes.decode`: NaN must give a NaN, -0.0 its
sign, everything else the exact bits. The same emitters also compile for NVPTX.
"""

from __future__ import annotations

import ctypes
import re

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest
from host_jit import compile_for_host, counted_loop, host_module

from tilevm import dtypes
from tilevm.backend.llvm import conversion as cv
from tilevm.dtypes import conversion as rules

TARGETS = [dtypes.parse(name) for name in rules.TARGETS]
SOURCES = list(dtypes.lowbit_dtypes())
I32 = ir.IntType(32)
PTR = ir.PointerType()
FLOAT_OPS = {"fadd", "fsub", "fmul", "fdiv", "frem", "fneg", "fma", "fptrunc", "fpext",
             "sitofp", "uitofp", "fptosi", "fptoui", "call"}

# The pairs that must be exact, read from the dtypes' ranges (not from the module).
F16_INEXACT = {"f6e5m0", "f7e5m1", "f7e6m0", "f8e6m1", "f8e7m0"}


def _pairs(include_rounding: bool = True):
    for src in SOURCES:
        for dst in TARGETS:
            exact = rules.is_exact(src, dst)
            if exact or include_rounding:
                yield src, dst, exact


def _offsets(src, dst) -> range:
    """The lane offsets (> 0) of pairs of codes the paired rule takes for (src, dst)."""
    if not rules.is_exact(src, dst) or dst.bits != 16:
        return range(0)
    return range(1, rules.max_pair_offset(src, dst) + 1)


def _loop(module: ir.Module, name: str, in_type: ir.Type, out_type: ir.Type, body) -> None:
    """`void name(ptr in, ptr out, i32 n)`: out[i] = body(builder, in[i]) for i < n."""

    def element(b: ir.IRBuilder, i: ir.Value, src: ir.Value, dst: ir.Value) -> None:
        value = b.load(b.gep(src, [i], source_etype=in_type), typ=in_type)
        b.store(body(b, value), b.gep(dst, [i], source_etype=out_type))

    counted_loop(module, name, element)


def _name(kind: str, src, dst) -> str:
    return f"{kind}_{src.name}_{dst.name}"


@pytest.fixture(scope="module")
def jit():
    module = host_module("conversions")
    for src, dst, exact in _pairs():
        ft = cv.float_ir_type(dst)
        opts = {"allow_rounding": not exact}
        _loop(module, _name("one", src, dst), I32, ft,
              lambda b, v, s=src, d=dst, o=opts: cv.emit_convert(b, v, s, d, **o))
        _loop(module, _name("pair", src, dst), I32, ir.VectorType(ft, 2),
              lambda b, v, s=src, d=dst, o=opts: cv.emit_convert_pair(b, v, s, d, **o))
        for offset in _offsets(src, dst):
            _loop(module, _name(f"pair{offset}", src, dst), I32, ir.VectorType(ft, 2),
                  lambda b, v, s=src, d=dst, o=offset: cv.emit_convert_pair(
                      b, v, s, d, offset=o))
        if src.bits <= 8 and exact:  # the scalar rule from an i8 code too
            _loop(module, _name("byte", src, dst), ir.IntType(8), ft,
                  lambda b, v, s=src, d=dst: cv.emit_convert(b, v, s, d))
    for bits in range(1, 9):
        per_word = 32 // bits
        for j in range(per_word):
            _loop(module, f"code_{bits}_{j}", I32, I32,
                  lambda b, v, j=j, bits=bits: cv.emit_extract_code(b, v, j, bits))
        for j in range(per_word - 1):
            _loop(module, f"next_{bits}_{j}", I32, I32,
                  lambda b, v, j=j, bits=bits: cv.emit_extract_pair(b, v, bits, j))
        if 16 % bits == 0:
            for j in range(16 // bits):
                _loop(module, f"far_{bits}_{j}", I32, I32,
                      lambda b, v, j=j, bits=bits: cv.emit_extract_pair(
                          b, v, bits, j, j + 16 // bits))
        for offset in range(32):  # fields of an i64 (two words)
            _loop(module, f"field_{bits}_{offset}", ir.IntType(64), I32,
                  lambda b, v, o=offset, bits=bits: cv.emit_extract_field(b, v, o, bits))
    engine = compile_for_host(module)
    proto = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)

    def call(name: str, inputs: np.ndarray, out_dtype, per_input: int = 1) -> np.ndarray:
        fn = proto(engine.get_function_address(name))
        inputs = np.ascontiguousarray(inputs)
        out = np.zeros(inputs.size * per_input, dtype=out_dtype)
        fn(inputs.ctypes.data, out.ctypes.data, inputs.size)
        return out

    call.engine = engine  # keep the engine alive with the fixture
    return call


# ---- the reference: dtypes.decode, as target bits -----------------------------------

def _bits_type(dst):
    return np.uint32 if dst.bits == 32 else np.uint16


def _expected_bits(values: np.ndarray, dst) -> np.ndarray:
    """The target bits of exact float64 values (rounded to nearest even for f16)."""
    if dst.name == "f32":
        f32 = values.astype(np.float32)
        assert np.array_equal(f32.astype(np.float64), values, equal_nan=True)
        return f32.view(np.uint32)
    if dst.name == "f16":
        with np.errstate(over="ignore"):
            return values.astype(np.float16).view(np.uint16)
    f32 = values.astype(np.float32).view(np.uint32)
    assert not np.any(f32[~np.isnan(values)] & 0xFFFF), "a value bf16 cannot hold"
    return (f32 >> 16).astype(np.uint16)


def _is_nan(bits: np.ndarray, dst) -> np.ndarray:
    e, m = dst.exponent_bits, dst.mantissa_bits
    bits = bits.astype(np.uint64)
    exponent = (bits >> np.uint64(m)) & np.uint64((1 << e) - 1)
    return (exponent == (1 << e) - 1) & ((bits & np.uint64((1 << m) - 1)) != 0)


def _check(got: np.ndarray, values: np.ndarray, dst, what: str) -> None:
    want = _expected_bits(values, dst)
    nan = np.isnan(values)
    assert np.array_equal(_is_nan(got, dst), nan), f"{what}: NaN where the codec has none"
    bad = np.flatnonzero((got != want) & ~nan)
    assert bad.size == 0, (f"{what}: {bad.size} wrong, first at {bad[0]}: got "
                           f"{int(got[bad[0]]):#x}, want {int(want[bad[0]]):#x} "
                           f"({values[bad[0]]!r})")


# ---- which pairs are exact ----------------------------------------------------------

def test_exact_pairs_follow_the_dtype_ranges():
    for src in SOURCES:
        assert rules.is_exact(src, "f32") and rules.is_exact(src, "bf16"), src
        assert rules.is_exact(src, "f16") == (src.name not in F16_INEXACT), src
        if not rules.is_exact(src, "f16"):
            with pytest.raises(rules.UnsupportedConversion, match="not exact"):
                rules.conversion_rule(src, "f16")
            values = dtypes.decode(np.arange(src.num_codes), src)
            assert (np.abs(values).max() > 65504
                    or src.smallest_subnormal < dtypes.f16.smallest_subnormal)
    with pytest.raises(rules.UnsupportedConversion):
        rules.conversion_rule("f16", "f32")
    with pytest.raises(rules.UnsupportedConversion):
        rules.conversion_rule("int4", "int8")


# ---- exhaustive: every code, every pair of codes -------------------------------------

@pytest.mark.parametrize("dst", TARGETS, ids=str)
def test_every_code_converts_exactly(jit, dst):
    for src, d, _ in _pairs():
        if d != dst:
            continue
        codes = np.arange(src.num_codes, dtype=np.uint32)
        values = dtypes.decode(codes, src)
        got = jit(_name("one", src, dst), codes, _bits_type(dst))
        _check(got, values, dst, f"{src} -> {dst}")
        # Bits above the code are ignored.
        noisy = codes | (np.random.default_rng(src.bits).integers(
            0, 1 << 24, codes.size, dtype=np.uint32) << np.uint32(src.bits))
        _check(jit(_name("one", src, dst), noisy, _bits_type(dst)), values, dst,
               f"{src} -> {dst} with high garbage")
        if rules.is_exact(src, dst):
            got8 = jit(_name("byte", src, dst), codes.astype(np.uint8), _bits_type(dst))
            _check(got8, values, dst, f"{src} -> {dst} from i8")


@pytest.mark.parametrize("dst", TARGETS, ids=str)
def test_every_pair_of_codes_converts_exactly(jit, dst):
    rng = np.random.default_rng(7)
    for src, d, _ in _pairs():
        if d != dst:
            continue
        n = src.num_codes
        first, second = (x.ravel().astype(np.uint32) for x in np.meshgrid(
            np.arange(n), np.arange(n), indexing="ij"))
        words = first | (second << np.uint32(16))
        values = np.stack([dtypes.decode(first, src), dtypes.decode(second, src)], 1).ravel()
        got = jit(_name("pair", src, dst), words, _bits_type(dst), per_input=2)
        _check(got, values, dst, f"pair {src} -> {dst}")
        # Lane bits above each code are ignored.
        garbage = rng.integers(0, 1 << 16, words.size, dtype=np.uint32)
        lane_noise = ((garbage << np.uint32(src.bits)) & np.uint32(0xFFFF)) \
            | ((garbage << np.uint32(16 + src.bits)) & np.uint32(0xFFFF0000))
        got = jit(_name("pair", src, dst), words | lane_noise, _bits_type(dst), per_input=2)
        _check(got, values, dst, f"pair {src} -> {dst} with lane garbage")


@pytest.mark.parametrize("dst", ["f16", "bf16"])
def test_every_pair_of_codes_at_a_lane_offset_converts_exactly(jit, dst):
    """Codes at bit `offset` of both lanes, random bits below and above them."""
    dst = dtypes.parse(dst)
    rng = np.random.default_rng(11)
    tested = 0
    for src, d, _ in _pairs(include_rounding=False):
        if d != dst:
            continue
        n = src.num_codes
        first, second = (x.ravel().astype(np.uint32) for x in np.meshgrid(
            np.arange(n), np.arange(n), indexing="ij"))
        values = np.stack([dtypes.decode(first, src), dtypes.decode(second, src)], 1).ravel()
        for offset in _offsets(src, dst):
            lane_mask = np.uint32(((1 << src.bits) - 1) << offset)
            noise = rng.integers(0, 1 << 32, first.size, dtype=np.uint64).astype(np.uint32)
            noise &= ~(lane_mask | (lane_mask << np.uint32(16)))
            words = (first << np.uint32(offset)) | (second << np.uint32(16 + offset)) | noise
            got = jit(_name(f"pair{offset}", src, dst), words, _bits_type(dst), per_input=2)
            _check(got, values, dst, f"pair {src} -> {dst} at offset {offset}")
            tested += 1
    # every width has offsets: integers up to T - b, floats up to 16 - b
    assert tested >= 40, tested


def test_lane_offsets_have_limits():
    assert rules.max_pair_offset("int4", "f16") == 6  # magic + u * 2^s inside 10 bits
    assert rules.max_pair_offset("int4", "bf16") == 3
    assert rules.max_pair_offset("uint8", "bf16") == 0  # the code has a bit more than T
    assert rules.max_pair_offset("f4e2m1", "bf16") == 12
    assert rules.max_pair_offset("int4", "f32") == 0
    b = ir.IRBuilder(ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), [I32]), "f")
                     .append_basic_block())
    with pytest.raises(ValueError, match="offsets 0..6, got 7"):
        cv.emit_convert_pair(b, b.function.args[0], "int4", "f16", offset=7)


# ---- extraction from packed words ----------------------------------------------------

@pytest.mark.parametrize("bits", range(1, 9))
def test_extract_codes_match_unpack(jit, bits):
    rng = np.random.default_rng(bits)
    words = rng.integers(0, 1 << 32, 512, dtype=np.uint64).astype(np.uint32)
    per_word = 32 // bits
    # Code j of a word is element j of the word's 4 little-endian bytes, as dtypes packs.
    reference = np.stack([dtypes.unpack(w.view(np.uint8), bits, per_word)
                          for w in words.reshape(-1, 1)]).astype(np.uint32)
    codes = {j: jit(f"code_{bits}_{j}", words, np.uint32) for j in range(per_word)}
    for j in range(per_word):
        assert np.array_equal(codes[j], reference[:, j]), (bits, j)
    for j in range(per_word - 1):
        got = jit(f"next_{bits}_{j}", words, np.uint32)
        assert np.array_equal(got, codes[j] | (codes[j + 1] << np.uint32(16))), (bits, j)
    if 16 % bits == 0:
        for j in range(16 // bits):
            got = jit(f"far_{bits}_{j}", words, np.uint32)
            want = codes[j] | (codes[j + 16 // bits] << np.uint32(16))
            assert np.array_equal(got, want), (bits, j)

    # A stream of words: code i (possibly straddling two words) is the field at offset
    # (i*b) mod 32 of the i64 `hi << 32 | lo` of its two words.
    stream = dtypes.unpack(words.view(np.uint8), bits, (words.size - 1) * 32 // bits)
    index = np.arange(stream.size)
    w, o = np.divmod(index * bits, 32)
    wide = words[w].astype(np.uint64) | (words[w + 1].astype(np.uint64) << np.uint64(32))
    for offset in range(32):
        chosen = o == offset
        if chosen.any():
            got = jit(f"field_{bits}_{offset}", wide[chosen], np.uint32)
            assert np.array_equal(got, stream[chosen]), (bits, offset)


# ---- the cheap rule: one float op per pair --------------------------------------------

def _shift_amounts_in_range(function_text: str) -> bool:
    """Every constant shift amount is below the shifted type's width (else poison)."""
    shifts = re.findall(r"= (?:shl|lshr|ashr) i(\d+) \S+, (\d+)", function_text)
    vector = re.findall(r"= (?:shl|lshr|ashr) <2 x i(\d+)> \S+, <i\d+ (\d+)", function_text)
    return all(int(amount) < int(width) for width, amount in shifts + vector)


def _float_ops(function_text: str) -> int:
    ops = re.findall(r"^\s*(?:%\S+ = )?(\w+)", function_text, flags=re.M)
    return sum(op in FLOAT_OPS for op in ops)


def test_one_float_op_per_pair():
    module = ir.Module(name="count")
    for src, dst, _ in _pairs(include_rounding=False):
        ft = cv.float_ir_type(dst)
        pair = ir.Function(module, ir.FunctionType(ir.VectorType(ft, 2), [I32]),
                           _name("pair", src, dst))
        b = ir.IRBuilder(pair.append_basic_block())
        b.ret(cv.emit_convert_pair(b, pair.args[0], src, dst))
        one = ir.Function(module, ir.FunctionType(ft, [I32]), _name("one", src, dst))
        b = ir.IRBuilder(one.append_basic_block())
        b.ret(cv.emit_convert(b, one.args[0], src, dst))
        rule = rules.conversion_rule(src, dst)
        # f8e5m2 -> f16 is the identity on the fields (same E, same bias): no float op.
        want = 0 if (src.name, dst.name) == ("f8e5m2", "f16") else 1
        assert rule.float_ops == want, (src, dst)
        assert _float_ops(str(pair)) == want, f"{src} -> {dst}:\n{pair}"
        assert _float_ops(str(one)) == want, f"{src} -> {dst}:\n{one}"
        assert _shift_amounts_in_range(str(pair)) and _shift_amounts_in_range(str(one))
        # And a handful of integer ops: the pair costs little more than one value.
        assert len(pair.blocks[0].instructions) <= 14, f"{src} -> {dst}:\n{pair}"
    llvm.parse_assembly(str(module)).verify()
    # The rounding route: the rule, then one fptrunc.
    assert rules.conversion_rule("f8e7m0", "f16", allow_rounding=True).float_ops == 2


# ---- portability: the same IR compiles for NVPTX, without calls ----------------------

def test_conversions_compile_to_ptx_without_calls():
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    module = ir.Module(name="ptx")
    module.triple = "nvptx64-nvidia-cuda"
    cases = [("int4", "f16"), ("uint8", "bf16"), ("int8", "bf16"), ("f4e2m1", "f16"),
             ("f6e3m2", "bf16"), ("f8e4m3", "f16"), ("f8e5m2", "f32"), ("f8e7m0", "f32"),
             ("int3", "f32")]
    for src, dst in cases:
        src, dst = dtypes.parse(src), dtypes.parse(dst)
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR]),
                         _name("pair", src, dst))
        b = ir.IRBuilder(fn.append_basic_block())
        word = b.load(fn.args[0], typ=I32)
        lanes = cv.emit_extract_pair(b, word, src.bits, 0)
        b.store(cv.emit_convert_pair(b, lanes, src, dst), fn.args[1])
        b.ret_void()
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    machine = llvm.Target.from_triple("nvptx64-nvidia-cuda").create_target_machine(
        cpu="sm_80", opt=2)
    ptx = machine.emit_assembly(parsed)
    assert ".target sm_80" in ptx
    assert "call" not in ptx and "__" not in ptx, ptx  # no libm, no runtime helpers
    assert ".ftz" not in ptx  # subnormal patterns must survive the float op
    assert re.search(r"\b(mul|sub|fma)\.rn\.f16x2\b", ptx), ptx
    assert re.search(r"\b(mul|sub|fma)\.rn\.bf16x2\b", ptx), ptx


def test_the_integer_bias_is_a_register_read_once_per_function():
    # `(code & mask) ^ bias` is one LOP3 only if ptxas cannot fold the bias into an
    # immediate: it is loaded from a module global, once, in the entry block. So is the
    # f16x2 multiplier 2^-4 of the codes at bit 4 (one register of its own, not the spare
    # half of another's).
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    module = ir.Module(name="bias")
    module.triple = "nvptx64-nvidia-cuda"
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR]), "pairs")
    b = ir.IRBuilder(fn.append_basic_block())
    word = b.load(fn.args[0], typ=I32)
    # codes at bit 0 of each lane (twice: one bias) and at bit 4 (another bias)
    for offset in (0, 4, 0):
        pair = cv.emit_convert_pair(b, word, "int4", "f16", offset=offset)
        b.store(pair, b.gep(fn.args[1], [ir.Constant(I32, offset)], source_etype=I32))
    b.ret_void()
    entry = fn.blocks[0].instructions
    loads = [i for i in entry if i.opname == "load" and "tilevm_opaque" in str(i)]
    # one per bias and one for the multiplier, first in the entry
    assert len(loads) == 3 and entry[:3] == loads
    rule = rules.conversion_rule("int4", "f16")
    for offset in (0, 4):
        bias = rule.flip << offset | rule.magic_bits
        name = f"tilevm_opaque_i32_{bias | bias << 16:x}"
        assert module.globals[name].initializer.constant == bias | bias << 16
    sixteenth = int(np.float16(2.0 ** -4).view(np.uint16))  # 0x2c00
    multiplier = module.globals[f"tilevm_opaque_i32_{sixteenth | sixteenth << 16:x}"]
    assert multiplier.initializer.constant == sixteenth | sixteenth << 16
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    ptx = llvm.Target.from_triple("nvptx64-nvidia-cuda").create_target_machine(
        cpu="sm_80", opt=2).emit_assembly(parsed)
    assert len(re.findall(r"ld\.global\S*\s+%r\d+, \[tilevm_opaque_", ptx)) == 3, ptx
    assert re.findall(r"xor\.b32\s+%r\d+, %r\d+, %r\d+;", ptx), ptx  # the bias a register
    # the multiplier a register too: every f16x2 fma takes it, none an immediate 2^-4
    fmas = re.findall(r"fma\.rn\.f16x2\s+%r\d+, %r\d+, (\S+), (\S+);", ptx)
    assert fmas and all(a.startswith("%r") for a, _ in fmas), ptx


def test_bfloat_constants_print_exactly():
    assert str(ir.Constant(cv.BFLOAT, 1.5)) == "bfloat 0xR3FC0"
    with pytest.raises(ValueError):
        str(ir.Constant(cv.BFLOAT, 1.0 + 2.0 ** -10))


# ---- on the GPU: the same emitters, through NVPTX, on every code --------------------

def _kernel(module: ir.Module, name: str, in_type: ir.Type, out_type: ir.Type, body) -> None:
    """`ptx_kernel void name(ptr in, ptr out, i32 n)`: out[i] = body(in[i]), one thread each."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I32]), name)
    fn.calling_convention = "ptx_kernel"
    src, dst, n = fn.args
    entry, work, done = (fn.append_basic_block(x) for x in ("entry", "work", "done"))
    b = ir.IRBuilder(entry)

    def sreg(reg: str) -> ir.Value:
        name = f"llvm.nvvm.read.ptx.sreg.{reg}"
        callee = module.globals.get(name) or ir.Function(module, ir.FunctionType(I32, []), name)
        return b.call(callee, [])

    i = b.add(b.mul(sreg("ctaid.x"), sreg("ntid.x")), sreg("tid.x"))
    b.cbranch(b.icmp_signed("<", i, n), work, done)
    b.position_at_end(work)
    value = b.load(b.gep(src, [i], source_etype=in_type), typ=in_type)
    b.store(body(b, value), b.gep(dst, [i], source_etype=out_type))
    b.branch(done)
    b.position_at_end(done)
    b.ret_void()


@pytest.mark.gpu
def test_every_code_and_pair_converts_exactly_on_the_gpu():
    from cuda.bindings import driver as cu

    def ok(result):
        err, *rest = result if isinstance(result, tuple) else (result,)
        assert err == cu.CUresult.CUDA_SUCCESS, err
        return rest[0] if len(rest) == 1 else rest

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    module = ir.Module(name="gpu_conversions")
    module.triple = "nvptx64-nvidia-cuda"
    for src, dst, _ in _pairs(include_rounding=False):
        ft = cv.float_ir_type(dst)
        _kernel(module, _name("one", src, dst), I32, ft,
                lambda b, v, s=src, d=dst: cv.emit_convert(b, v, s, d))
        _kernel(module, _name("pair", src, dst), I32, ir.VectorType(ft, 2),
                lambda b, v, s=src, d=dst: cv.emit_convert_pair(b, v, s, d))
        for offset in _offsets(src, dst):
            _kernel(module, _name(f"pair{offset}", src, dst), I32, ir.VectorType(ft, 2),
                    lambda b, v, s=src, d=dst, o=offset: cv.emit_convert_pair(
                        b, v, s, d, offset=o))
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    ptx = llvm.Target.from_triple("nvptx64-nvidia-cuda").create_target_machine(
        cpu="sm_80", opt=2).emit_assembly(parsed)

    ok(cu.cuInit(0))
    device = ok(cu.cuDeviceGet(0))
    context = ok(cu.cuDevicePrimaryCtxRetain(device))
    ok(cu.cuCtxSetCurrent(context))
    loaded = ok(cu.cuModuleLoadData(ptx.encode() + b"\0"))

    def run(name: str, inputs: np.ndarray, out_dtype, per_input: int = 1) -> np.ndarray:
        inputs = np.ascontiguousarray(inputs, dtype=np.uint32)
        out = np.zeros(inputs.size * per_input, dtype=out_dtype)
        d_in, d_out = ok(cu.cuMemAlloc(inputs.nbytes)), ok(cu.cuMemAlloc(out.nbytes))
        ok(cu.cuMemcpyHtoD(d_in, inputs.ctypes.data, inputs.nbytes))
        kernel = ok(cu.cuModuleGetFunction(loaded, name.encode()))
        threads = 256
        ok(cu.cuLaunchKernel(kernel, -(-inputs.size // threads), 1, 1, threads, 1, 1, 0, 0,
                             ((d_in, d_out, inputs.size), (None, None, ctypes.c_int32)), 0))
        ok(cu.cuCtxSynchronize())
        ok(cu.cuMemcpyDtoH(out.ctypes.data, d_out, out.nbytes))
        ok(cu.cuMemFree(d_in))
        ok(cu.cuMemFree(d_out))
        return out

    try:
        for src, dst, _ in _pairs(include_rounding=False):
            n = src.num_codes
            codes = np.arange(n, dtype=np.uint32)
            _check(run(_name("one", src, dst), codes, _bits_type(dst)),
                   dtypes.decode(codes, src), dst, f"GPU {src} -> {dst}")
            first, second = (x.ravel().astype(np.uint32) for x in np.meshgrid(
                codes, codes, indexing="ij"))
            values = np.stack([dtypes.decode(first, src), dtypes.decode(second, src)],
                              1).ravel()
            got = run(_name("pair", src, dst), first | (second << np.uint32(16)),
                      _bits_type(dst), per_input=2)
            _check(got, values, dst, f"GPU pair {src} -> {dst}")
            for offset in _offsets(src, dst):  # codes at an offset, ones around them
                lanes = (first | (second << np.uint32(16))) << np.uint32(offset)
                around = np.uint32(0xFFFFFFFF) ^ (np.uint32(
                    ((1 << src.bits) - 1) * 0x10001) << np.uint32(offset))
                got = run(_name(f"pair{offset}", src, dst), lanes | around, _bits_type(dst),
                          per_input=2)
                _check(got, values, dst, f"GPU pair {src} -> {dst} at offset {offset}")
    finally:
        ok(cu.cuModuleUnload(loaded))
        ok(cu.cuDevicePrimaryCtxRelease(device))
