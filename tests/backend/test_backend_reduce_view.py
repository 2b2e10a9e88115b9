"""The GPU lowering of `reduce` and `view`: PTX that ptxas accepts without spills (CPU),
the bit-array view rules on the CPU (llvmlite JIT), and compiled kernels against the
interpreter on random ragged inputs (GPU, marked `gpu`)."""

from __future__ import annotations

import ctypes

import llvmlite.ir as ir
import numpy as np
import pytest
from host_jit import compile_for_host, host_module
from kernel_harness import PROGRAMS, ROOT, compile_once, load_module, ptxas_report, run_both

from tilevm.backend.llvm import bits
from tilevm.backend.llvm.lowering.reduction import _thread_digits
from tilevm.backend.llvm.types import llvm_type
from tilevm.dtypes import decode, pack, parse, unpack
from tilevm.ir.errors import VMError
from tilevm.layouts import local, replicated, spatial

ARCHES = ("sm_80", "sm_90")




k = load_module(PROGRAMS / "reduce_view_kernels.py")
softmax = load_module(ROOT / "examples" / "softmax.py")

REDUCTIONS = [k.row_reduce_f32, k.row_reduce_f16, k.col_reduce_f32, k.col_reduce_i32,
              k.col_reduce_3warps, k.rows_in_registers, k.block_total, softmax.softmax_f32,
              softmax.softmax_f16]
VIEWS = [*k.dequantize.values(), *k.repack.values(), k.half_bytes]


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("kernel", REDUCTIONS + VIEWS, ids=lambda v: v.name)
def test_ptxas_accepts_without_spills(kernel, arch):
    compiled = compile_once(kernel.specialize(), arch)
    report = ptxas_report(compiled.ptx, arch)
    assert report[kernel.name].spill_bytes == 0


def _ptx(kernel, **constants) -> str:
    return compile_once(kernel.specialize(**constants), "sm_90").ptx


def test_warp_reductions_are_butterfly_shuffles():
    # [8, 128] f32: a row over 32 lanes (x 4 registers): 5 shuffles per row and reduction.
    ptx = _ptx(k.row_reduce_f32)
    assert ptx.count("shfl.sync.bfly") == 2 * 5 * 3 and "bar.sync" not in ptx
    ptx = _ptx(softmax.softmax_f16)
    assert "shfl.sync.bfly" in ptx and "bar.sync" not in ptx and ".shared" not in ptx
    # A whole row in one thread: no communication at all.
    ptx = _ptx(k.rows_in_registers)
    assert "shfl" not in ptx and "bar.sync" not in ptx


def test_cross_warp_reductions_go_through_shared_memory():
    # [64, 32] over 128 threads: 16 threads per column, 4 in a warp (2 shuffles), 4 warps.
    ptx = _ptx(k.col_reduce_f32)
    assert "shfl.sync.bfly" in ptx and "st.shared" in ptx and "ld.shared" in ptx
    assert ptx.count("bar.sync") == 2 * 3
    # A 1-d tile over 128 threads: 5 lane bits (shuffles) and 4 warps (shared memory).
    ptx = _ptx(k.block_total)
    assert ptx.count("shfl.sync.bfly") == 2 * 5 and ptx.count("bar.sync") == 2 * 2
    # 3 warps: a digit of 12 threads (not a power of two) goes through shared memory only.
    ptx = _ptx(k.col_reduce_3warps)
    assert "shfl" not in ptx and "ld.shared" in ptx


def test_reducing_codes_is_a_clear_error():
    with pytest.raises(VMError, match="cast sub-byte and 8-bit float codes first") as err:
        compile_once(k.reduce_codes.specialize(), "sm_80")
    assert err.value.loc is not None and err.value.loc.file.endswith("reduce_view_kernels.py")


@pytest.mark.parametrize("layout, dim, masks, cross", [
    (spatial(4, 32).local(1, 4), 1, [1, 2, 4, 8, 16], []),
    (spatial(4, 32).local(1, 4), 0, [], [(32, 4)]),
    (spatial(16, 8).local(1, 4), 0, [8, 16], [(32, 4)]),
    (spatial(12, 8), 0, [], [(8, 12)]),
    (spatial(8, 16) * replicated(2, ndim=2), 1, [2, 4, 8, 16], []),
    (spatial(2, 64), 1, [1, 2, 4, 8, 16], [(32, 2)]),  # straddles the warp boundary
    (local(2, 1).spatial(128, 1), 1, [], []),
])
def test_thread_digits_split_lanes_and_warps(layout, dim, masks, cross):
    assert _thread_digits(layout, dim) == (masks, cross)


# ---- view: the bit-array rule, run on the CPU ----------------------------------------------

VIEW_CASES = [  # (src dtype, out dtype, src elements per thread)
    ("uint8", "int3", 3), ("uint8", "int3", 12), ("uint8", "uint5", 5), ("uint8", "f6e3m2", 3),
    ("uint8", "int7", 7), ("uint8", "uint1", 2), ("uint8", "int2", 5), ("int3", "uint8", 16),
    ("f6e2m3", "uint8", 8), ("uint5", "int8", 8), ("f16", "uint8", 2), ("uint8", "bf16", 8),
    ("f32", "int4", 2), ("int6", "f16", 8), ("int16", "int6", 3), ("uint32", "f4e2m1", 1),
    ("int64", "int5", 5), ("int3", "int64", 64), ("f8e4m3", "int4", 4), ("int7", "int5", 5),
    ("uint1", "f32", 64)]


def _register_bits(codes: np.ndarray, dtype) -> np.ndarray:
    """The bits a register holds for each code (as uint64): a signed sub-byte integer is
    sign-extended into its i8."""
    out = codes.astype(np.uint64)
    if dtype.is_integer and dtype.is_signed and 1 < dtype.bits < 8:
        top = (out >> np.uint64(dtype.bits - 1)) & np.uint64(1)
        out |= top * np.uint64(0xFF ^ ((1 << dtype.bits) - 1))
    return out


def _storage(dtype) -> np.dtype:
    width = llvm_type(dtype).width if isinstance(llvm_type(dtype), ir.IntType) else dtype.bits
    return {1: np.uint8, 8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[width]


@pytest.fixture(scope="module")
def view_jit():
    module = host_module("views")
    for s, o, n_src in VIEW_CASES:
        src, out = parse(s), parse(o)
        count = n_src * src.bits // out.bits
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType()] * 2),
                         f"view_{s}_{o}_{n_src}")
        b = ir.IRBuilder(fn.append_basic_block())
        sty, oty = llvm_type(src), llvm_type(out)
        mem_s = ir.IntType(8) if sty == ir.IntType(1) else sty
        values = []
        for i in range(n_src):
            v = b.load(b.gep(fn.args[0], [ir.Constant(ir.IntType(64), i)], source_etype=mem_s),
                       typ=mem_s)
            values.append(b.trunc(v, sty) if mem_s != sty else v)
        words = bits.pack_words(b, [bits.to_bits(b, v, src) for v in values], src.bits)
        for j in range(count):
            v = bits.from_bits(b, bits.extract_bits(b, words, j * out.bits, out.bits), out)
            mem_o = ir.IntType(8) if oty == ir.IntType(1) else oty
            if mem_o != oty:
                v = b.zext(v, mem_o)
            b.store(v, b.gep(fn.args[1], [ir.Constant(ir.IntType(64), j)], source_etype=mem_o))
        b.ret_void()
    return compile_for_host(module)


@pytest.mark.parametrize("s, o, n_src", VIEW_CASES)
def test_view_bit_array_matches_pack(view_jit, s, o, n_src):
    src, out = parse(s), parse(o)
    count = n_src * src.bits // out.bits
    proto = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
    fn = proto(view_jit.get_function_address(f"view_{s}_{o}_{n_src}"))
    rng = np.random.default_rng(src.bits * 100 + out.bits)
    for _ in range(20):
        codes = rng.integers(0, 1 << min(src.bits, 62), n_src, dtype=np.uint64)
        held = _register_bits(codes, src)
        if src.bits < 8 and not (src.is_integer and src.is_signed) and src.bits > 1:
            held |= rng.integers(0, 256, n_src).astype(np.uint64) << np.uint64(src.bits)
            held &= np.uint64(0xFF)  # noise above a code: the view ignores it
        inputs = held.astype(_storage(src))
        got = np.zeros(count, dtype=_storage(out))
        fn(inputs.ctypes.data, got.ctypes.data)
        # The reference: the dtypes bitstream of the codes, cut into out's codes.
        stream = pack(codes, src.bits) if src.bits <= 8 else \
            codes.astype(f"<u{src.bits // 8}").view(np.uint8)
        if out.bits <= 8:
            expected = unpack(stream, out.bits, count).astype(np.uint64)
        else:
            expected = np.frombuffer(stream.tobytes(), dtype=f"<u{out.bits // 8}")
            expected = expected.astype(np.uint64)
        expected = _register_bits(expected, out).astype(_storage(out))
        assert np.array_equal(got, expected), (codes, got, expected)


# ---- on the GPU ------------------------------------------------------------------------------



def _close_sums(got, expected, x, axis, dtype):
    """A float sum within f32 accumulation error (and one rounding to f16)."""
    scale = np.abs(x.astype(np.float64)).sum(axis=axis).reshape(expected.shape)
    tol = 1e-6 * scale + (np.abs(expected.astype(np.float64)) * 2 ** -10 if dtype == "f16"
                          else 0)
    assert np.all(np.abs(got.astype(np.float64) - expected.astype(np.float64)) <= tol + 1e-30)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("M, N", [(8, 128), (13, 100), (37, 5)])
def test_gpu_row_reduce_matches_interpreter(dtype, M, N):
    kernel = k.row_reduce_f32 if dtype == "f32" else k.row_reduce_f16
    np_type = np.float32 if dtype == "f32" else np.float16
    rng = np.random.default_rng(M * N)
    x = (rng.standard_normal((M, N)) * 4).astype(np_type)
    x[M // 2, N // 3] = np.nan  # max and min propagate NaN
    outs = [np.full((M, 1), 7, np_type) for _ in range(3)]
    got, expected = run_both(kernel, [x, *outs, M, N])
    assert np.array_equal(got[2], expected[2], equal_nan=True)
    assert np.array_equal(got[3], expected[3], equal_nan=True)
    assert np.isnan(got[2][M // 2, 0]) and np.isnan(got[3][M // 2, 0])
    ok = ~np.isnan(expected[1][:, 0])
    _close_sums(got[1][ok], expected[1][ok], x[ok], 1, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [k.col_reduce_f32, k.col_reduce_3warps],
                         ids=lambda v: v.name)
@pytest.mark.parametrize("M, N", [(64, 32), (50, 70), (3, 9)])
def test_gpu_col_reduce_matches_interpreter(kernel, M, N):
    rng = np.random.default_rng(M + N)
    limit = 48 if kernel is k.col_reduce_3warps else 64
    M = min(M, limit)
    x = rng.standard_normal((M, N)).astype(np.float32)
    outs = [np.full(N, 7, np.float32) for _ in range(3)]
    got, expected = run_both(kernel, [x, *outs, M, N])
    # Rows past M load 0: the interpreter and the GPU both see them.
    padded = np.zeros((limit, N), np.float32)
    padded[:M] = x
    _close_sums(got[1], expected[1], padded, 0, "f32")
    assert np.array_equal(got[2], expected[2]) and np.array_equal(got[3], expected[3])


@pytest.mark.gpu
@pytest.mark.parametrize("M, N", [(64, 32), (41, 77)])
def test_gpu_integer_col_reduce_is_exact(M, N):
    rng = np.random.default_rng(M * N)
    x = rng.integers(-2 ** 31, 2 ** 31, (M, N)).astype(np.int32)  # the sums wrap
    outs = [np.full(N, 7, np.int32) for _ in range(3)]
    got, expected = run_both(k.col_reduce_i32, [x, *outs, M, N])
    for i in (1, 2, 3):
        assert np.array_equal(got[i], expected[i])


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1024, 3000, 77])
def test_gpu_block_total_matches_interpreter(n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    blocks = -(-n // 1024)
    got, expected = run_both(k.block_total, [x, np.zeros(blocks, np.float32),
                                              np.zeros(blocks, np.float32), n])
    padded = np.zeros(blocks * 1024, np.float32)
    padded[:n] = x
    _close_sums(got[1], expected[1], padded.reshape(blocks, 1024), 1, "f32")
    assert np.array_equal(got[2], expected[2])


@pytest.mark.gpu
def test_gpu_in_thread_reduction_matches_interpreter():
    rng = np.random.default_rng(5)
    M, N = 300, 6
    x = rng.standard_normal((M, N)).astype(np.float32)
    got, expected = run_both(k.rows_in_registers, [x, np.full(M, 7, np.float32), M, N])
    _close_sums(got[1], expected[1], np.pad(x, ((0, 0), (0, 2))), 1, "f32")


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [softmax.softmax_f32, softmax.softmax_f16],
                         ids=lambda v: v.name)
@pytest.mark.parametrize("M, N", [(19, 100), (4, 128), (7, 33)])
def test_gpu_softmax_matches_interpreter(kernel, M, N):
    rng = np.random.default_rng(M * N)
    args, constants = softmax.example_inputs(rng, kernel, M=M, N=N)
    got, expected = run_both(kernel, args, constants)
    tol = 2e-6 if kernel is softmax.softmax_f32 else 2 ** -10
    g, e = got[1].astype(np.float64), expected[1].astype(np.float64)
    assert np.all(np.abs(g - e) <= tol * np.abs(e) + 1e-7)
    ref = softmax.reference(*args, **constants)[1]
    assert np.allclose(g, ref, rtol=1e-2 if kernel is softmax.softmax_f16 else 1e-5,
                       atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("wdtype", k.DEQUANT_DTYPES)
@pytest.mark.parametrize("K, N", [(32, 64), (45, 136)])
def test_gpu_dequantize_matches_interpreter(wdtype, K, N):
    kernel = k.dequantize[wdtype]
    b = parse(wdtype).bits
    rng = np.random.default_rng(K * N + b)
    w = rng.integers(0, 256, (K, N * b // 8)).astype(np.uint8)
    scales = rng.uniform(0.25, 2, (1, N)).astype(np.float16)
    out = np.full((K, N), np.nan, np.float16)
    got, expected = run_both(kernel, [w, scales, out, K, N])
    assert np.array_equal(got[2], expected[2], equal_nan=True)
    # and numpy's own decoding of the packed codes
    codes = np.stack([unpack(row, b, N) for row in w])
    with np.errstate(over="ignore"):  # f8e5m2 * 2 may overflow f16, on both sides
        ref = (decode(codes, parse(wdtype)) * scales.astype(np.float64)).astype(np.float16)
    assert np.array_equal(got[2], ref, equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("wdtype", k.REPACK_DTYPES)
def test_gpu_view_round_trip_matches_interpreter(wdtype):
    kernel = k.repack[wdtype]
    b = parse(wdtype).bits
    K = 100
    rng = np.random.default_rng(b)
    w = rng.integers(0, 256, (K, b)).astype(np.uint8)
    got, expected = run_both(kernel, [w, np.zeros_like(w), np.full((K, 8), np.nan, np.float32),
                                       K])
    assert np.array_equal(got[1], w) and np.array_equal(expected[1], w)
    assert np.array_equal(got[2], expected[2], equal_nan=True)


@pytest.mark.gpu
def test_gpu_view_of_halves_as_bytes():
    n = 700
    x = np.random.default_rng(0).standard_normal(n).astype(np.float16)
    got, expected = run_both(k.half_bytes, [x, np.zeros(2 * n, np.uint8), n])
    assert np.array_equal(got[1], x.view(np.uint8)) and np.array_equal(expected[1], got[1])
