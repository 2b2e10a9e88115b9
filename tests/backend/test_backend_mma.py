"""`dot` on tensor cores: the fragment tilings layout inference gives its operands (checked
against the PTX ISA's formulas), the backward propagation to loads, the `mma.sync` in
the PTX (CPU), and compiled kernels against the interpreter (GPU, marked `gpu`)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from kernel_harness import PROGRAMS, ROOT, compile_once, load_module, ptxas_report, run_both

from tilevm import dtypes
from tilevm.backend.analysis.fragments import dot_layouts, mma_warp_grid
from tilevm.backend.pipeline import run_passes
from tilevm.dtypes import parse
from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.transform import instructions
from tilevm.vm.interp_values import to_host

ARCHES = ("sm_80", "sm_90")




mk = load_module(PROGRAMS / "mma_kernels.py")
matmul_module = load_module(ROOT / "examples" / "matmul.py")
matmul = matmul_module.matmul


# ---- the tilings, against the PTX ISA ------------------------------------------------------

def _isa_tables(m, n, k, num_warps, fk=16, wide=2):
    """Expected (a, b, c) coordinates [thread, local] from the ISA's fragment formulas and
    the documented warp arrangement (warp w = wm_idx * wn + wn_idx owns a contiguous
    block of rm x rn C fragments; its fragments numbered row-major; A and B fragments
    (row block, k block) / (k block, column block) row-major)."""
    mt, nt, kt = m // 16, n // 8, k // fk
    wm, wn = mma_warp_grid(mt, nt, num_warps)
    rm, rn = mt // wm, nt // wn
    threads = num_warps * 32
    a = np.zeros((threads, rm * kt * 4 * wide, 2), int)
    b = np.zeros((threads, kt * rn * 2 * wide, 2), int)
    c = np.zeros((threads, rm * rn * 4, 2), int)
    for t in range(threads):
        w, lane = (t // 32) % (wm * wn), t % 32
        wi, wj = divmod(w, wn)
        group, tig = lane >> 2, lane % 4
        for lc in range(c.shape[1]):
            (fi, fj), i = divmod(lc // 4, rn), lc % 4
            c[t, lc] = ((wi * rm + fi) * 16 + group + 8 * (i >> 1),
                        (wj * rn + fj) * 8 + 2 * tig + (i & 1))
        per_a = 4 * wide  # registers' elements of one A fragment
        for la in range(a.shape[1]):
            (fi, kk), i = divmod(la // per_a, kt), la % per_a
            if wide == 2:  # m16n8k16: a_i, 8 elements
                row, col = group + 8 * ((i >> 1) & 1), 2 * tig + (i & 1) + 8 * (i >> 2)
            else:  # m16n8k32: 16 elements
                row, col = group + 8 * ((i >> 2) & 1), 4 * tig + (i & 3) + 16 * (i >> 3)
            a[t, la] = ((wi * rm + fi) * 16 + row, kk * fk + col)
        per_b = 2 * wide
        for lb in range(b.shape[1]):
            (kk, fj), i = divmod(lb // per_b, rn), lb % per_b
            if wide == 2:
                row = 2 * tig + (i & 1) + 8 * (i >> 1)
            else:
                row = 4 * tig + (i & 3) + 16 * (i >> 2)
            b[t, lb] = (kk * fk + row, (wj * rn + fj) * 8 + group)
    return a, b, c, (wm, wn)


@pytest.mark.parametrize("m, n, k, num_warps", [
    (16, 8, 16, 1), (32, 32, 32, 4), (32, 64, 32, 4), (64, 32, 16, 4), (128, 128, 32, 8),
    (16, 64, 32, 4), (64, 8, 16, 2), (16, 8, 16, 4), (32, 16, 64, 8)])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_dot_tilings_hold_the_isa_fragments(m, n, k, num_warps, dtype):
    a, b, c = dot_layouts(m, n, k, parse(dtype), num_warps * 32)
    want_a, want_b, want_c, _ = _isa_tables(m, n, k, num_warps)
    assert np.array_equal(a.table(), want_a)
    assert np.array_equal(b.table(), want_b)
    assert np.array_equal(c.table(), want_c)
    # Every element of c is computed: each warp's fragments are distinct, together all.
    held = {tuple(x) for x in c.table().reshape(-1, 2).tolist()}
    assert len(held) == m * n


@pytest.mark.parametrize("m, n, k, num_warps", [(16, 8, 32, 1), (32, 32, 64, 4),
                                                 (64, 16, 32, 8)])
def test_int8_tilings_hold_the_m16n8k32_fragments(m, n, k, num_warps):
    a, b, c = dot_layouts(m, n, k, parse("int8"), num_warps * 32)
    want_a, want_b, want_c, _ = _isa_tables(m, n, k, num_warps, fk=32, wide=4)
    assert np.array_equal(a.table(), want_a)
    assert np.array_equal(b.table(), want_b)
    assert np.array_equal(c.table(), want_c)


def test_warp_grid_uses_every_warp_and_balances_the_operands():
    assert mma_warp_grid(2, 4, 4) == (2, 2)  # 32 x 32: 2 x 2 warps, 16 x 16 each
    assert mma_warp_grid(1, 8, 4) == (1, 4)  # 16 x 64: warps along n
    assert mma_warp_grid(8, 16, 8) == (4, 2)
    assert mma_warp_grid(1, 1, 4) == (1, 1)  # one fragment: the other warps copy it
    assert mma_warp_grid(3, 5, 4) == (1, 1)


@pytest.mark.parametrize("m, n, k, dtype", [(8, 8, 16, "f16"), (16, 4, 16, "f16"),
                                             (16, 8, 8, "bf16"), (16, 8, 16, "int8"),
                                             (16, 8, 16, "f32"), (16, 8, 16, "f8e4m3")])
def test_no_tiling_for_shapes_and_dtypes_without_an_mma(m, n, k, dtype):
    assert dot_layouts(m, n, k, parse(dtype), 128) is None


# ---- layout inference: backward propagation ----------------------------------------------

def _by_name(program):
    return {t.name: t.layout for inst in instructions(program.body)
            for t in [inst.output, *inst.input_tensors()]
            if t is not None and t.layout is not None}


def test_matmul_loads_and_accumulator_take_the_fragment_tilings():
    program = run_passes(matmul.specialize())
    a, b, c = dot_layouts(32, 32, 32, parse("f16"), 128)
    layouts = _by_name(program)
    assert layouts["ta"] == a and layouts["tb"] == b
    assert layouts["acc"] == c and layouts["acc.1"] == c  # the carried tile and its assign
    dot = next(i for i in instructions(program.body) if isinstance(i, ins.Dot))
    assert (dot.a.layout, dot.b.layout, dot.c.layout, dot.out.layout) == (a, b, c, c)


def test_fragment_tilings_reach_loads_through_cast_and_elementwise():
    program = run_passes(mk.dot_through_cast.specialize())
    a, b, c = dot_layouts(32, 32, 16, parse("f16"), 128)
    for inst in instructions(program.body):
        if isinstance(inst, ins.LoadGlobal) and inst.out.dtype == parse("f32") \
                and inst.out.type.static_shape == (32, 16):
            assert inst.out.layout == a  # the f32 load feeding the cast
        if isinstance(inst, ins.LoadGlobal) and inst.out.dtype == parse("f16"):
            assert inst.out.layout == b  # the f16 load feeding `tb * 0.5`
        if isinstance(inst, (ins.Cast, ins.Elementwise)):
            assert inst.out.layout in (a, b)


# ---- compiling -----------------------------------------------------------------------------

COMPILED = [(matmul, {}), (matmul, {"bm": 64, "bn": 64, "bk": 32}),
            (matmul, {"bm": 16, "bn": 64, "bk": 16}), (matmul, {"bm": 64, "bn": 16, "bk": 64}),
            (mk.dot_f16, {}), (mk.dot_f16, {"num_warps": 8, "bm": 64, "bn": 64}),
            (mk.dot_bf16, {}), (mk.dot_f16_acc16, {}), (mk.dot_through_cast, {}),
            (mk.dot_int8, {}), (mk.dot_uint8, {})]


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("kernel, constants", COMPILED,
                         ids=lambda v: getattr(v, "name", None) or str(v))
def test_dot_compiles_to_mma_sync_without_spills(kernel, constants, arch):
    compiled = compile_once(kernel.specialize(**constants), arch)
    program = compiled.lowered
    dot = next(i for i in instructions(program.body) if isinstance(i, ins.Dot))
    (m, k), n = dot.a.type.static_shape, dot.b.type.static_shape[1]
    integer = dot.a.dtype.is_integer
    fk = 32 if integer else 16
    name = "m16n8k32" if integer else "m16n8k16"
    src = {"f16": "f16", "bf16": "bf16", "int8": "s8", "uint8": "u8"}[dot.a.dtype.name]
    acc = "s32" if integer else "f32"
    wm, wn = mma_warp_grid(m // 16, n // 8, program.num_threads // 32)
    expected = (m // 16 // wm) * (n // 8 // wn) * (k // fk)  # per warp, per k-step
    instruction = f"mma.sync.aligned.{name}.row.col.{acc}.{src}.{src}.{acc}"
    assert compiled.ptx.count(instruction) == expected
    report = ptxas_report(compiled.ptx, arch)
    assert report[kernel.name].spill_bytes == 0


@pytest.mark.parametrize("constants, message", [
    ({"bm": 8}, "M a multiple of 16"),
    ({"bn": 4}, "N of 8"),
    ({"bk": 8}, "K of 16"),
])
def test_shapes_that_are_not_mma_multiples_are_errors(constants, message):
    with pytest.raises(VMError, match=message) as err:
        compile_once(matmul.specialize(**constants), "sm_80")
    assert err.value.loc is not None and err.value.loc.file.endswith("matmul.py")


def test_a_pinned_conflicting_layout_is_converted_not_miscompiled():
    # The user pinned %ta to a layout that is not the tensor-core tiling: the
    # convert_layouts pass moves it through shared memory into the tiling mma needs.
    program = run_passes(mk.dot_pinned_layout.specialize())
    converted = [inst.out for inst in instructions(program.body)
                 if inst.opname == "load_shared" and inst.out.name.startswith("ta.cvt")]
    pinned = next(inst.output for inst in instructions(program.body)
                  if inst.output is not None and inst.output.name == "ta")
    assert converted and converted[0].layout != pinned.layout
    ptx = compile_once(mk.dot_pinned_layout.specialize(), "sm_80").ptx
    assert "mma.sync.aligned.m16n8k16" in ptx


def test_dot_without_a_tensor_core_instruction_is_an_error():
    with pytest.raises(VMError, match="dot on f32 inputs is not supported"):
        compile_once(mk.dot_f32.specialize(), "sm_80")


# ---- on the GPU ---------------------------------------------------------------------------



def _bound(av, bv, cv, k, out_dtype):
    """|compiled - interpreter|: both sum exact products in f32, in different orders
    (each within k * 2^-24 of the exact sum, relative to sum |a b| + |c|); an f16 result
    may then round to the neighbouring f16."""
    scale = np.abs(av) @ np.abs(bv) + np.abs(cv)
    bound = 4 * (k + 2) * 2.0**-24 * scale
    if out_dtype == "f16":
        bound = bound + 2.0**-10 * (np.abs(av @ bv + cv) + bound) + 2.0**-24
    return bound


def _values(rng, shape, dtype):
    return dtypes.decode(dtypes.encode(rng.standard_normal(shape), dtype), dtype)


SHAPES = [(1, 1, 1), (33, 70, 100), (64, 64, 64), (70, 45, 17), (130, 9, 250), (16, 8, 16)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES + [1, 2, 3], ids=str)  # ints: random shapes
@pytest.mark.parametrize("constants", [{}, {"bm": 64, "bn": 64, "bk": 32},
                                       {"bm": 16, "bn": 64, "bk": 16}], ids=str)
def test_gpu_matmul_example_matches_interpreter(shape, constants):
    rng = np.random.default_rng(zlib.crc32(repr((shape, constants)).encode()))
    sizes = {} if isinstance(shape, int) else dict(zip("MNK", shape))
    args, _ = matmul_module.example_inputs(rng, **sizes)
    got, expected = run_both(matmul, args, constants)
    a, b = args[0].astype(np.float64), args[1].astype(np.float64)
    out, ref = got[2].astype(np.float64), expected[2].astype(np.float64)
    assert not np.isnan(out).any()
    assert np.all(np.abs(out - ref) <= _bound(a, b, 0 * ref, args[5], "f16"))


@pytest.mark.gpu
@pytest.mark.parametrize("M, N, K", SHAPES)
@pytest.mark.parametrize("kernel, dtype, acc, constants", [
    (mk.dot_f16, "f16", "f32", {}),
    (mk.dot_f16, "f16", "f32", {"num_warps": 8, "bm": 64, "bn": 64}),
    (mk.dot_f16, "f16", "f32", {"num_warps": 1, "bm": 16, "bn": 32, "bk": 16}),
    (mk.dot_f16, "f16", "f32", {"num_warps": 2, "bm": 32, "bn": 8, "bk": 48}),
    (mk.dot_bf16, "bf16", "f32", {}),
    (mk.dot_f16_acc16, "f16", "f16", {}),
    (mk.dot_through_cast, "f16", "f32", {}),
], ids=lambda v: getattr(v, "name", None) or str(v))
def test_gpu_dot_matches_interpreter(M, N, K, kernel, dtype, acc, constants):
    rng = np.random.default_rng(M * 1000003 + N * 1009 + K)
    av, bv = _values(rng, (M, K), dtype), _values(rng, (K, N), dtype)
    cv = _values(rng, (M, N), acc)
    a_host = av.astype(np.float32) if kernel is mk.dot_through_cast else to_host(av, dtype)
    args = [a_host, to_host(bv, dtype), to_host(cv, acc),
            np.full((M, N), np.nan, np.float16 if acc == "f16" else np.float32), M, N, K]
    got, expected = run_both(kernel, args, constants)
    out = got[3].astype(np.float64)
    ref = expected[3].astype(np.float64)
    assert not np.isnan(out).any()
    scale_b = 0.5 if kernel is mk.dot_through_cast else 1.0  # it computes a @ (b * 0.5)
    assert np.all(np.abs(out - ref) <= _bound(av, bv * scale_b, cv, K, acc))


@pytest.mark.gpu
@pytest.mark.parametrize("M, N, K", SHAPES)
@pytest.mark.parametrize("kernel, dtype", [(mk.dot_int8, "int8"), (mk.dot_uint8, "uint8")],
                         ids=lambda v: getattr(v, "name", None) or str(v))
def test_gpu_integer_dot_is_exact(M, N, K, kernel, dtype):
    rng = np.random.default_rng(M * 7919 + N * 31 + K)
    lo, hi = (-128, 128) if dtype == "int8" else (0, 256)
    np_dtype = np.int8 if dtype == "int8" else np.uint8
    a = rng.integers(lo, hi, (M, K)).astype(np_dtype)
    b = rng.integers(lo, hi, (K, N)).astype(np_dtype)
    c = rng.integers(-2**20, 2**20, (M, N)).astype(np.int32)
    got, expected = run_both(kernel, [a, b, c, np.zeros((M, N), np.int32), M, N, K], {})
    assert np.array_equal(got[3], expected[3])
    assert np.array_equal(got[3], a.astype(np.int64) @ b.astype(np.int64) + c)
