"""The GPU lowering of `arange`: each thread's indices (run on the CPU through llvmlite,
for every thread of several layouts, against the layout's own table of coordinates);
layout inference giving broadcast index tiles, and what is computed from them, the
layout they are read in (no conversion); PTX for sm_80 and sm_90a that ptxas accepts;
and the compiled kernels against the interpreter (GPU, marked `gpu`)."""

from __future__ import annotations

import ctypes

import llvmlite.ir as ir
import numpy as np
import pytest
from host_jit import compile_for_host, host_module
from kernel_harness import PROGRAMS, compile_once, load_module, ptxas_report, run_both

from tilevm.backend.llvm.context import KernelContext
from tilevm.backend.llvm.lowering.elementwise import lower_arange
from tilevm.backend.llvm.types import I32
from tilevm.backend.pipeline import run_passes
from tilevm.dtypes import parse
from tilevm.ir import instructions as ins
from tilevm.ir.printer import format_program
from tilevm.ir.types import MemorySpace, Tensor, TensorType
from tilevm.layouts import local, replicated, spatial
from tilevm.layouts.fragments import mma_m16n8k16_a, mma_m16n8k16_c

k = load_module(PROGRAMS / "arange_kernels.py")

# (layout, dim, dtype): spread, repeated, replicated, mma fragments, 1-d and 3-d, and
# dtypes whose registers are packed (uint8: four to a word) or not.
CASES = [
    (spatial(16, 8) * local(1, 4), 0, "int32"),
    (spatial(16, 8) * local(1, 4), 1, "int32"),
    (local(2, 1) * spatial(8, 16) * local(2, 2), 0, "int16"),
    (replicated(4, ndim=2) * local(1, 2) * spatial(1, 8) * local(1, 2), 1, "uint8"),
    (spatial(4, 1) * local(1, 2) * mma_m16n8k16_c(), 0, "int32"),
    (spatial(4, 1) * local(1, 2) * mma_m16n8k16_c(), 1, "int32"),
    (replicated(4, ndim=2) * mma_m16n8k16_a(), 1, "int8"),
    (local(3) * spatial(32) * local(2), 0, "int32"),
    (spatial(2, 2, 8) * local(2, 1, 4) * replicated(4, ndim=3), 2, "uint8"),
    (spatial(2, 2, 8) * local(2, 1, 4) * replicated(4, ndim=3), 0, "int16"),
]


def _case_name(i: int) -> str:
    return f"arange_{i}"


@pytest.fixture(scope="module")
def arange_jit():
    """`void arange_<i>(i32 tid, i32* out)`: thread tid's values of case i's tile, each
    widened to i32, at its local indices."""
    module = host_module("aranges")
    for i, (layout, dim, dtype) in enumerate(CASES):
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I32, ir.PointerType()]),
                         _case_name(i))
        cg = KernelContext()
        cg.entry = fn.append_basic_block("entry")
        cg.b = ir.IRBuilder(cg.entry)
        cg.tid, cg.tensors, cg.carried, cg.wgmma, cg.inst = fn.args[0], {}, set(), None, None
        cg._thread_parts = {}
        out = Tensor("idx", TensorType(MemorySpace.REGISTER, parse(dtype), layout.shape, layout))
        lower_arange(cg, ins.Arange(out=out, dim=dim))
        for l, value in enumerate(cg.register_values(out)):
            wide = cg.b.sext(value, I32) if parse(dtype).is_signed else cg.b.zext(value, I32)
            cg.b.store(wide, cg.b.gep(fn.args[1], [ir.Constant(I32, l)], source_etype=I32))
        cg.b.ret_void()
    engine = compile_for_host(module)
    return lambda i: ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_void_p)(
        engine.get_function_address(_case_name(i)))


@pytest.mark.parametrize("i", range(len(CASES)))
def test_each_thread_holds_its_elements_indices(arange_jit, i):
    layout, dim, _ = CASES[i]
    table = layout.table()  # [thread, local, dim]: the coordinate each register holds
    fn = arange_jit(i)
    got = np.zeros(table.shape[:2], np.int32)
    buffer = np.zeros(layout.local_size, np.int32)
    for t in range(layout.num_threads):
        fn(t, buffer.ctypes.data)
        got[t] = buffer
    assert np.array_equal(got, table[:, :, dim])


def test_broadcast_index_tiles_take_the_layout_they_are_read_in():
    # `arange([1, n], 1) + k0` (a chain from an index tile) is made where the [m, n]
    # comparison reads it: no conversion through shared memory.
    text = format_program(run_passes(k.masked.specialize(), arch="sm_80"))
    assert "arange dim=0" in text and "arange dim=1" in text
    assert ".cvt" not in text and "alloc_shared" not in text, text


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("kernel", [k.index_tiles_mma, k.narrow_indices, k.masked],
                         ids=lambda v: v.name)
def test_ptxas_accepts(kernel, arch):
    constants = {"m": 64, "n": 16} if kernel is k.index_tiles_mma else {}
    ptx = compile_once(kernel.specialize(**constants), arch).ptx
    report = ptxas_report(ptx, arch)[kernel.name]
    assert report.spill_stores == 0 and report.registers < 64, str(report)
    assert "%tid.x" in ptx and ".local" not in ptx  # indices from the thread index


# ---- on the GPU ------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("kernel, m, n", [
    (k.index_tiles, 16, 32), (k.index_tiles, 5, 300), (k.index_tiles_mma, 64, 16),
    (k.index_tiles_replicated, 16, 32)], ids=lambda v: getattr(v, "name", str(v)))
def test_gpu_index_tiles(kernel, m, n):
    rows, cols = np.full((m, n), -1, np.int32), np.full((m, n), -1, np.int32)
    got, expected = run_both(kernel, [rows, cols], {"m": m, "n": n})
    want_rows, want_cols = np.indices((m, n))
    assert np.array_equal(expected[0], want_rows) and np.array_equal(expected[1], want_cols)
    assert np.array_equal(got[0], want_rows) and np.array_equal(got[1], want_cols)


@pytest.mark.gpu
def test_gpu_narrow_index_tiles():
    got, expected = run_both(k.narrow_indices, [np.full(256, -1, np.int16)])
    assert np.array_equal(got[0], np.arange(256)) and np.array_equal(expected[0], got[0])


@pytest.mark.gpu
@pytest.mark.parametrize("S, q0, k0", [(100, 0, 0), (40, 32, 16), (20, 5, 0), (70, 0, 30)])
def test_gpu_masks(S, q0, k0):
    x = np.random.default_rng(S).standard_normal((32, 64)).astype(np.float32)
    got, expected = run_both(k.masked, [x, np.zeros_like(x), S, q0, k0])
    assert np.array_equal(got[1], expected[1])
