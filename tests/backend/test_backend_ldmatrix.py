"""Instruction selection of `ldmatrix` for `load_shared` (backend/analysis/ldmatrix.py):
which register tilings qualify, checked against the PTX ISA's description of ldmatrix
(CPU); the PTX of matmuls staged through shared memory (CPU, ptxas); and those kernels
against the interpreter (GPU, marked `gpu`)."""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest
from kernel_harness import PROGRAMS, load_module, run_both

from tilevm import dtypes
from tilevm.backend import ptxas
from tilevm.backend.analysis.fragments import dot_layouts
from tilevm.backend.analysis.ldmatrix import select_ldmatrix
from tilevm.backend.pipeline import compile_program
from tilevm.dtypes import parse
from tilevm.layouts import local, spatial
from tilevm.layouts.shared_layout import SharedLayout, column_major, row_major, swizzled
from tilevm.layouts.swizzle import Swizzle

ARCHES = ("sm_80", "sm_90")




lk = load_module(PROGRAMS / "ldmatrix_kernels.py")


# ---- the selection, against the ISA -------------------------------------------------------

def _simulate(choice, threads: int, shared: SharedLayout) -> np.ndarray:
    """What each (thread, local) receives when the chosen instructions run, from the ISA's
    text alone: lane i gives the address of row i % 8 of matrix i // 8 (a byte offset
    in `shared`, whose 8 elements are the row); destination register m of lane
    4 * g + t holds, of matrix m, elements (row g, columns 2t, 2t+1), or with .trans
    (rows 2t, 2t+1 of column g); the low half first. Returns the shared element
    coordinates [thread, local, dim] (the table the register layout must have)."""
    addr = choice.addresses.table().copy()
    addr[..., choice.col_dim] *= 8  # the address layout counts rows' runs in 8s
    by_byte = {int(b): c for c, b in np.ndenumerate(shared.all_offset_bytes())}
    n = choice.num
    out = np.zeros((threads, choice.instructions * n * 2, shared.rank), np.int64)
    for tid in range(threads):
        lane, warp0 = tid % 32, tid - tid % 32
        g, t = lane // 4, lane % 4
        for k in range(choice.instructions):
            for m in range(n):
                for j in range(2):
                    row, col = (2 * t + j, g) if choice.trans else (g, 2 * t + j)
                    start = shared.offset_bytes(tuple(addr[warp0 + 8 * m + row, k]))
                    assert start % 16 == 0  # 16-byte aligned rows
                    out[tid, 2 * (n * k + m) + j] = by_byte[start + 2 * col]
    return out


TILINGS = [(16, 8, 16, 1), (32, 32, 32, 4), (64, 64, 32, 4), (16, 64, 16, 4), (64, 16, 64, 4),
           (128, 128, 32, 8), (32, 16, 64, 8)]


@pytest.mark.parametrize("m, n, k, warps", TILINGS)
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("make", [row_major, swizzled], ids=["row_major", "swizzled"])
def test_mma_operand_tilings_select_ldmatrix(m, n, k, warps, dtype, make):
    a, b, c = dot_layouts(m, n, k, parse(dtype), warps * 32)
    for name, layout, shape, trans in (("a", a, (m, k), False), ("b", b, (k, n), True),
                                       ("c", c, (m, n), False)):
        shared = make(shape, dtype)
        choice = select_ldmatrix(layout, shared, warps * 32)
        assert choice is not None, name
        assert choice.trans == trans, name  # B stored [k, n] needs .trans
        assert (choice.row_dim, choice.col_dim) == (0, 1)
        pairs = layout.local_size // 2
        assert choice.num == (4 if pairs % 4 == 0 else 2 if pairs % 2 == 0 else 1)
        assert np.array_equal(_simulate(choice, warps * 32, shared), layout.table()), name
    # A is always whole 16x16 fragments: x4
    assert select_ldmatrix(a, make((m, k), dtype), warps * 32).num == 4


def test_b_fragment_alone_is_ldmatrix_x2_trans():
    _, b, _ = dot_layouts(16, 8, 16, parse("f16"), 32)
    choice = select_ldmatrix(b, row_major((16, 8), "f16"), 32)
    assert (choice.num, choice.trans) == (2, True)
    assert "x2.trans" in choice.ptx


def test_k_major_tiles_swap_trans():
    """A stored k-major (column-major [m, k]: dim 0 contiguous) needs .trans; B stored
    n-major (column-major [k, n]) does not."""
    a, b, _ = dot_layouts(32, 32, 32, parse("f16"), 128)
    ca = select_ldmatrix(a, column_major((32, 32), "f16"), 128)
    cb = select_ldmatrix(b, column_major((32, 32), "f16"), 128)
    assert (ca.trans, ca.row_dim, ca.col_dim, ca.num) == (True, 1, 0, 4)
    assert (cb.trans, cb.row_dim, cb.col_dim, cb.num) == (False, 1, 0, 4)
    for choice, layout in ((ca, a), (cb, b)):
        assert np.array_equal(_simulate(choice, 128, column_major((32, 32), "f16")),
                              layout.table())


def test_offsets_and_padding_that_keep_rows_aligned_qualify():
    a, _, _ = dot_layouts(32, 32, 16, parse("f16"), 128)
    padded = SharedLayout((32, 40), (40, 1), 16)  # 80-byte rows: 16-byte aligned
    choice = select_ldmatrix(a, padded, 128, alloc_offset=256, offset_divisors=[1, 8])
    assert choice is not None and choice.num == 4


@pytest.mark.parametrize("why, shared, kwargs", [
    ("f32 elements", row_major((32, 32), "f32"), {}),
    ("8-bit elements", row_major((32, 32), "int8"), {}),
    ("tile offset 4 elements into a row", row_major((32, 40), "f16"),
     {"offset_divisors": [0, 4]}),
    ("allocation 8 bytes off", row_major((32, 32), "f16"), {"alloc_offset": 8}),
    ("row stride of 20 elements (40 bytes)", SharedLayout((32, 20), (20, 1), 16), {}),
    ("a swizzle of 8-byte units", row_major((32, 32), "f16").with_swizzle(Swizzle(2, 3, 4)),
     {}),
    ("no unit-stride dimension", SharedLayout((32, 32), (64, 2), 16), {}),
])
def test_loads_that_do_not_qualify(why, shared, kwargs):
    a, _, _ = dot_layouts(32, 16, 16, parse("f16"), 128)  # A: a [32, 16] tile, x4 fragments
    assert select_ldmatrix(a, row_major((32, 32), "f16"), 128) is not None  # the baseline
    assert select_ldmatrix(a, shared, 128, **kwargs) is None, why


def test_layouts_not_made_of_ldmatrix_fragments_do_not_qualify():
    shared = row_major((32, 32), "f16")
    assert select_ldmatrix(spatial(32, 4).local(1, 8), shared, 128) is None  # row runs
    assert select_ldmatrix(local(1, 2).spatial(32, 4).local(1, 4), shared, 128) is None
    a, _, _ = dot_layouts(32, 32, 32, parse("f16"), 128)
    assert select_ldmatrix(a, shared, 256) is None  # not the block's threads


# ---- compiling ----------------------------------------------------------------------------

COMPILED = [
    # kernel, constants, expected ldmatrix instructions in the PTX (mnemonic -> count)
    (lk.matmul_pipelined, {}, {"x4": 8, "x4.trans": 8}),
    (lk.matmul_pipelined, {"bm": 16, "bn": 64, "bk": 16}, {"x4": 2, "x4.trans": 2}),
    (lk.matmul_pipelined, {"bm": 128, "bn": 64, "bk": 32, "num_warps": 8},
     {"x4": 8, "x4.trans": 8}),
    (lk.matmul_staged, {}, {"x4": 2, "x4.trans": 4}),
    (lk.matmul_misaligned, {}, {"x2.trans": 1}),  # A's rows are 8 bytes off: no ldmatrix
]


def _ldmatrix_counts(ptx: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in ptx.splitlines():
        if "ldmatrix.sync.aligned.m8n8." in line:
            op = line.split()[0].removeprefix("ldmatrix.sync.aligned.m8n8.")
            op = op.removesuffix(".shared.b16")
            counts[op] = counts.get(op, 0) + 1
    return counts


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("kernel, constants, expected", COMPILED,
                         ids=lambda v: getattr(v, "name", None) or str(v))
def test_shared_memory_matmuls_compile_to_ldmatrix_without_spills(kernel, constants,
                                                                  expected, arch):
    compiled = compile_program(kernel.specialize(**constants), arch)
    assert _ldmatrix_counts(compiled.ptx) == expected
    assert "mma.sync.aligned.m16n8k16" in compiled.ptx
    report = ptxas.check_ptx(compiled.ptx, arch)
    assert report[kernel.name].spill_bytes == 0


# ---- on the GPU ---------------------------------------------------------------------------



def _bound(av, bv, k, out_dtype):
    """As in test_backend_mma: both sum exact products in f32 in different orders; an f16
    result may then round to the neighbouring f16."""
    scale = np.abs(av) @ np.abs(bv)
    bound = 4 * (k + 2) * 2.0**-24 * scale
    if out_dtype == "f16":
        bound = bound + 2.0**-10 * (np.abs(av @ bv) + bound) + 2.0**-24
    return bound


SHAPES = [(1, 1, 1), (33, 70, 100), (64, 64, 64), (70, 45, 17), (130, 9, 250), 1, 2, 3]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=str)  # ints: random shapes
@pytest.mark.parametrize("kernel, dtype, out, constants", [
    (lk.matmul_pipelined, "f16", "f16", {}),
    (lk.matmul_pipelined, "f16", "f16", {"bm": 16, "bn": 64, "bk": 16}),
    (lk.matmul_pipelined, "f16", "f16", {"bm": 128, "bn": 64, "bk": 32, "num_warps": 8}),
    (lk.matmul_staged, "bf16", "f32", {}),
    (lk.matmul_misaligned, "f16", "f32", {}),
], ids=lambda v: getattr(v, "name", None) or str(v))
def test_gpu_shared_memory_matmuls_match_interpreter(shape, kernel, dtype, out, constants):
    rng = np.random.default_rng(zlib.crc32(repr((shape, kernel.name, constants)).encode()))
    if isinstance(shape, int):
        shape = tuple(int(x) for x in rng.integers((1, 1, 1), (150, 150, 300)))
    M, N, K = shape
    av = dtypes.decode(dtypes.encode(rng.standard_normal((M, K)), dtype), dtype)
    bv = dtypes.decode(dtypes.encode(rng.standard_normal((K, N)), dtype), dtype)
    from tilevm.vm.interp_values import to_host

    args = [to_host(av, dtype), to_host(bv, dtype),
            np.full((M, N), np.nan, np.float16 if out == "f16" else np.float32), M, N, K]
    got, expected = run_both(kernel, args, constants)
    res, ref = got[2].astype(np.float64), expected[2].astype(np.float64)
    assert not np.isnan(res).any()
    assert np.all(np.abs(res - ref) <= _bound(av, bv, K, out))


# ---- stmatrix: store_shared by the same rule (sm_90) -----------------------------------------

@pytest.mark.parametrize("arch, expected", [("sm_90a", 4), ("sm_90", 4), ("sm_80", 0)])
@pytest.mark.parametrize("constants, mnemonic", [
    ({}, "x4"), ({"b_fragments": True}, "x4.trans"), ({"swizzle": False}, "x4")])
def test_fragment_stores_select_stmatrix_on_sm90(constants, mnemonic, arch, expected):
    """A store of an mma fragment tiling is `stmatrix` (its rows the same 16-byte runs as
    `ldmatrix`'s) where the architecture has it: 4 instructions of 4 matrices for a
    64 x 64 tile over 128 threads, `.trans` for B fragments (pairs along the rows)."""
    ptx = compile_program(lk.store_fragments.specialize(**constants), arch).ptx
    found = re.findall(r"stmatrix\.sync\.aligned\.m8n8\.(\S+)\.shared\.b16", ptx)
    assert found == [mnemonic] * expected
    if expected:
        assert "st.shared" not in ptx.replace("stmatrix", "")  # every element that way
    report = ptxas.check_ptx(ptx, arch)
    assert report[lk.store_fragments.name].spill_bytes == 0


@pytest.mark.gpu
@pytest.mark.parametrize("constants", [{}, {"b_fragments": True}, {"swizzle": False}],
                         ids=str)
def test_gpu_fragment_stores_through_stmatrix_keep_every_element(constants):
    from tilevm.backend.launch import launch_program

    x = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float16)
    y = np.full_like(x, np.nan)
    launch_program(lk.store_fragments.specialize(**constants), [x, y])
    np.testing.assert_array_equal(y, x)
