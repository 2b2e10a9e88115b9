"""Layout conversions: the broadcast rule of `infer_layouts` and the pass
`convert_layouts` (conversions through shared memory exactly where needed), and the
quantized matmul example compiled for every weight type (CPU), then run against the
interpreter (GPU)."""

import zlib

import numpy as np
import pytest
from kernel_harness import PROGRAMS, ROOT, compile_once, load_module, run_both

from tilevm import dtypes
from tilevm.backend.passes.convert_layouts import convert_layouts
from tilevm.backend.passes.infer_layouts import (
    broadcast_compatible,
    broadcast_layout,
    infer_layouts,
)
from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.transform import instructions, map_tensors
from tilevm.ir.verifier import verify
from tilevm.layouts import local, replicated, spatial

ck = load_module(PROGRAMS / "convert_kernels.py")
qmm = load_module(ROOT / "examples" / "quantized_matmul.py")
matmul = load_module(ROOT / "examples" / "matmul.py")
softmax = load_module(ROOT / "examples" / "softmax.py")

QMM_DTYPES = ["int2", "int3", "int4", "uint4", "int5", "int6", "int8", "f3e1m1", "f4e2m1",
              "f5e2m2", "f6e3m2", "f6e2m3", "f8e4m3", "f8e5m2"]


def _converted(program):
    """The names of the tensors whose conversion the pass inserted (load_shared out of a
    `.smem` buffer), and the program after the pass."""
    after = convert_layouts(infer_layouts(program))
    verify(after)
    loads = [i.out.name for i in instructions(after.body)
             if isinstance(i, ins.LoadShared) and ".smem" in i.src.name]
    return loads, after


# ---- the broadcast rule ----------------------------------------------------------------------

def test_broadcast_layout_reduces_over_the_broadcast_dims():
    tile = local(2, 1).spatial(16, 8).local(1, 8)
    row = broadcast_layout(tile, (1, 64))
    assert row == tile.reduce(0, keepdims=True) and row.num_threads == 128
    assert broadcast_compatible(row, (1, 64), tile)
    col = broadcast_layout(tile, (32, 1))
    assert broadcast_compatible(col, (32, 1), tile)
    assert not broadcast_compatible(replicated(2, ndim=2) * spatial(1, 64), (1, 64), tile)
    flat = broadcast_layout(tile, (64,))  # a missing leading dim
    assert flat.shape == (64,) and broadcast_compatible(flat, (64,), tile)


def test_the_scale_row_of_the_quantized_matmul_is_loaded_where_it_is_needed():
    program = infer_layouts(qmm.quantized_matmul.specialize(wdtype=dtypes.parse("int4"),
                                                            group_size=32))
    for inst in instructions(program.body):
        if isinstance(inst, ins.Elementwise):
            scale = inst.args[1]
            assert scale.type.static_shape == (1, 64)
            assert broadcast_compatible(scale.layout, (1, 64), inst.out.layout)


# ---- where conversions go --------------------------------------------------------------------

def test_no_conversion_where_layouts_agree():
    for program in (ck.scale_rows.specialize(), matmul.matmul.specialize(),
                    *(k.specialize(block_n=64, rows=2) for k in _softmax_kernels())):
        loads, after = _converted(program)
        assert loads == []
        assert after == infer_layouts(program)  # unchanged


def _softmax_kernels():
    return [softmax.softmax_f32, softmax.softmax_f16]


@pytest.mark.parametrize("kernel, expected", [
    (ck.add_pinned, ["tz.cvt", "ts.cvt"]),
    (ck.dot_pinned, ["ta.cvt", "tb.cvt"]),
    (ck.dot_pinned_acc, ["acc.cvt", "acc.1"]),  # c in, then the result back out
])
def test_conversions_are_inserted_exactly_where_needed(kernel, expected):
    loads, after = _converted(kernel.specialize())
    assert loads == expected
    seq = [i.opname for i in instructions(after.body)]
    start = seq.index("alloc_shared")
    assert seq[start:start + 6] == ["alloc_shared", "store_shared", "sync", "load_shared",
                                    "sync", "free_shared"]


def test_qmm_converts_the_f16_b_operand_only():
    loads, after = _converted(qmm.quantized_matmul.specialize(wdtype=dtypes.parse("int3"),
                                                              group_size=32))
    dots = [i for i in instructions(after.body) if isinstance(i, ins.Dot)]
    assert len(loads) == 2 and all(d.b.name in loads for d in dots)  # one per stage
    assert all(d.b.dtype == dtypes.parse("f16") for d in dots)


def test_a_sub_byte_tile_that_must_move_is_an_error():
    # Retype the pinned operand z to int4: its conversion cannot go through shared memory.
    program = map_tensors(infer_layouts(ck.add_pinned.specialize()), _int4)
    with pytest.raises(VMError, match="int4"):
        convert_layouts(program)


def _int4(t):
    from tilevm.ir.types import Tensor, TensorType
    if isinstance(t, Tensor) and t.name == "tz":
        return Tensor(t.name, TensorType(t.type.space, dtypes.parse("int4"), t.type.shape,
                                         t.layout))
    return t


# ---- the quantized matmul compiles: tests/backend/test_compile_examples.py (every weight type,
# both group sizes, sm_80 and sm_90, zero spills) -----------------------------------------

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_examples_still_compile(arch):
    compile_once(matmul.matmul.specialize(), arch)
    for k in _softmax_kernels():
        compile_once(k.specialize(block_n=64, rows=2), arch)


# ---- on the GPU ------------------------------------------------------------------------------



def _dot_bound(av, bv, k):
    """f32 sums of exact products in different orders, each within k * 2^-24 of the
    exact sum relative to sum |a b| (tests/backend/test_backend_mma.py), then an f16 rounding."""
    bound = 4 * (k + 2) * 2.0**-24 * (np.abs(av) @ np.abs(bv))
    return bound + 2.0**-10 * (np.abs(av @ bv) + bound) + 2.0**-24


@pytest.mark.gpu
@pytest.mark.parametrize("group_size", [32, 128])
@pytest.mark.parametrize("wdtype", QMM_DTYPES)
def test_gpu_qmm_matches_interpreter(wdtype, group_size):
    rng = np.random.default_rng(zlib.crc32(f"{wdtype}-{group_size}".encode()))
    M = int(rng.integers(1, 40))  # ragged
    N = 8 * int(rng.integers(5, 11))  # a multiple of 8, ragged against bn = 64
    K = group_size * int(rng.integers(1, 4))
    args, constants = qmm.example_inputs(rng, M=M, N=N, K=K, wdtype=wdtype,
                                         group_size=group_size)
    got, expected = run_both(qmm.quantized_matmul, args, constants)
    x, w, scales = args[:3]
    w16 = qmm.dequantize(w, scales, wdtype, group_size).astype(np.float16).astype(np.float64)
    out, ref = got[3].astype(np.float64), expected[3].astype(np.float64)
    assert not np.isnan(out).any()
    bound = 2 * _dot_bound(x.astype(np.float64), w16, K)
    assert np.all(np.abs(out - ref) <= bound), np.abs(out - ref).max()


@pytest.mark.gpu
@pytest.mark.parametrize("M, N", [(32, 32), (45, 70), (7, 9)])
def test_gpu_elementwise_conversions_match_interpreter(M, N):
    rng = np.random.default_rng(M * N)
    x, z = (rng.standard_normal((M, N)).astype(np.float32) for _ in range(2))
    s = rng.standard_normal((1, N)).astype(np.float32)
    y = np.full((M, N), np.nan, np.float32)
    got, expected = run_both(ck.add_pinned, [x, z, s, y, M, N], {})
    assert np.array_equal(got[3], expected[3])
    xs = rng.standard_normal((M, N)).astype(np.float16)
    ss = rng.standard_normal((1, N)).astype(np.float16)
    ys = np.full((M, N), np.nan, np.float16)
    got, expected = run_both(ck.scale_rows, [xs, ss, ys, M, N], {})
    assert np.array_equal(got[2], expected[2])


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [ck.dot_pinned, ck.dot_pinned_acc], ids=lambda k: k.name)
@pytest.mark.parametrize("M, N, K", [(32, 32, 32), (50, 70, 96), (5, 8, 32)])
def test_gpu_dot_conversions_match_interpreter(kernel, M, N, K):
    rng = np.random.default_rng(M + N + K)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    out = np.full((M, N), np.nan, np.float32)
    got, expected = run_both(kernel, [a, b, out, M, N, K], {})
    av, bv = a.astype(np.float64), b.astype(np.float64)
    bound = 4 * (K + 2) * 2.0**-24 * (np.abs(av) @ np.abs(bv))
    assert np.all(np.abs(got[2].astype(np.float64) - expected[2]) <= bound)
