"""`dot` with g matrices in a shared b ([g, k, n]): block i of a's and c's rows is
multiplied by b[i] (`ir.instructions.Dot`). The interpreter against numpy, what the
verifier and the lowering refuse, the PTX (each warpgroup's wgmma descriptors start at
its matrix), and on an H100 the same products."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import compile_once, ptxas_report, require_sm90

from tilevm.ir.errors import VMError
from tilevm.ir.verifier import verify
from tilevm.layouts.shared_layout import swizzled
from tilevm.vm import lang as tv
from tilevm.vm.interpreter import run


@tv.kernel(num_warps=8)
def grouped(a: tv.ptr(tv.f16, const=True), b: tv.ptr(tv.f16, const=True),
            y: tv.ptr(tv.f32), *, groups: int = 2, rows: int = 128, k: int = 64,
            n: int = 64):
    """y = the rows of a [rows, k] by blocks, block i times b[i] (b: [groups, k, n])."""
    tv.grid(1)
    ga, gb = tv.global_view(a, [rows, k]), tv.global_view(b, [groups, k, n])
    bs = tv.alloc_shared(tv.f16, [groups, k, n],
                         layout=swizzled([groups, n, k], tv.f16).permute((0, 2, 1)))
    tv.store_shared(bs, tv.load_global(gb, [0, 0, 0], [groups, k, n]))
    tv.sync()
    acc = tv.dot(tv.load_global(ga, [0, 0], [rows, k]), bs, tv.zeros([rows, n], tv.f32))
    tv.store_global(tv.global_view(y, [rows, n]), acc, [0, 0])


@tv.kernel(num_warps=4)
def grouped_in_registers(a: tv.ptr(tv.f16, const=True), y: tv.ptr(tv.f32)):
    tv.grid(1)
    ga = tv.global_view(a, [64, 64])
    b = tv.load_global(tv.global_view(a, [2, 32, 64]), [0, 0, 0], [2, 32, 64])
    tv.store_global(tv.global_view(y, [64, 64]),
                    tv.dot(tv.load_global(ga, [0, 0], [64, 32]), b), [0, 0])


def _problem(groups: int, rows: int, k: int = 64, n: int = 64, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, k)).astype(np.float16)
    b = rng.standard_normal((groups, k, n)).astype(np.float16)
    block = rows // groups
    want = np.concatenate([a[i * block:(i + 1) * block].astype(np.float64) @ b[i]
                           for i in range(groups)])
    return a, b, want


@pytest.mark.parametrize("groups, rows", [(2, 128), (1, 128), (4, 256)])
def test_each_block_of_rows_is_multiplied_by_its_matrix(groups, rows):
    a, b, want = _problem(groups, rows)
    y = np.zeros((rows, 64), np.float32)
    run(grouped.specialize(groups=groups, rows=rows), [a, b, y])
    assert np.abs(y - want).max() <= 1e-3 * np.abs(want).max()


def test_the_verifier_and_the_frontend_refuse_what_is_not_a_grouped_product():
    with pytest.raises(VMError, match=r"tv.dot multiplies 2-d tiles \(b may be a shared "):
        grouped_in_registers.specialize()
    with pytest.raises(VMError, match="a's 128 rows do not split into b's 3 blocks"):
        grouped.specialize(groups=3)


def test_each_warpgroup_reads_its_matrix():
    """Two warpgroups of 64 rows: the descriptors of warpgroup 1 start one matrix (8 KB)
    past warpgroup 0's; ptxas accepts the code."""
    program = grouped.specialize(groups=2, rows=128)
    verify(program)
    ptx = compile_once(program, "sm_90a").ptx
    assert ptx.count("wgmma.mma_async") == 4  # one warpgroup's 64 rows x 4 k-steps
    assert "8192;" in ptx  # (tid << 6) & 8192: warpgroup 1's matrix


def test_inferred_layouts_keep_each_wgmma_in_one_block():
    """Two 64-row wgmmas a warpgroup (256 rows, 8 warps, 4 matrices): the inferred layouts
    interleave the warps' rows so that each wgmma's 64 rows are one block; ptxas accepts
    the code."""
    ptx = compile_once(grouped.specialize(groups=4, rows=256), "sm_90a").ptx
    assert ptx.count("wgmma.mma_async") == 8  # two rows of wgmmas x 4 k-steps
    ptxas_report(ptx, "sm_90a")


def test_a_wgmma_whose_rows_span_two_matrices_is_refused():
    """One warpgroup (4 warps) issues 64-row wgmmas: blocks of 32 rows cannot be told
    apart within one."""
    k = tv.kernel(num_warps=4)(grouped.fn)
    with pytest.raises(VMError, match=r"warpgroup 0's wgmma rows \[0, 16, 32, 48\] \(16 "
                                      r"each\) span blocks \[0, 1\] of 32 rows"):
        compile_once(k.specialize(groups=2, rows=64), "sm_90a")


@pytest.mark.gpu
@pytest.mark.parametrize("groups, rows", [(2, 128), (4, 256)])
def test_gpu_each_block_of_rows_is_multiplied_by_its_matrix(groups, rows):
    from tilevm.backend.launch import launch_program
    require_sm90("wgmma's grouped b")
    a, b, want = _problem(groups, rows, seed=groups)
    y = np.zeros((rows, 64), np.float32)
    launch_program(grouped.specialize(groups=groups, rows=rows), [a, b, y])
    assert np.abs(y - want).max() <= 1e-3 * np.abs(want).max()
