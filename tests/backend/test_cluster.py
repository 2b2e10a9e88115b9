"""Clusters of blocks (`tv.cluster(n)`) and multicast copies (`tv.copy_async(...,
multicast=True)`): what the frontend and the verifier accept, the text form, the
barrier protocol in the PTX (lowering.tma), the launch's grid check, and on an H100 the
matmul whose blocks share their x tiles against float64."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from kernel_harness import compile_once, require_sm90

from tilevm.backend.analysis.signature import signature_from_program
from tilevm.backend.analysis.tma import multicast_refill_bound, tensor_maps, tma_ring
from tilevm.backend.cuda.errors import ArgumentValueError
from tilevm.backend.cuda.validate import grid_for
from tilevm.backend.launch import launch_program
from tilevm.backend.pipeline import compile_program
from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.parser import parse_program
from tilevm.ir.printer import format_program
from tilevm.ir.transform import instructions
from tilevm.ir.verifier import verify
from tilevm.kernels.qmm_dequant import wt_matmul_kernel
from tilevm.vm import lang as tv


@tv.kernel(num_warps=4)
def pair_sums(x: tv.ptr(tv.f16, const=True), y: tv.ptr(tv.f32), M: tv.int32,
              G: tv.int32, *, blocks: int = 2, rows: int = 64):
    """Twice the `rows`-row block c of x [M, 64] into columns 64 r .. of y [M, 512],
    for block r of cluster c: every block of a cluster copies the same tile twice (two
    buffers, multicast) and sums the copies; the grid is G blocks."""
    tv.producer_warp()
    tv.cluster(blocks)
    tv.grid(G)
    gx = tv.global_view(x, [M, 64])
    row = tv.block_idx(0) // blocks * rows
    col = tv.block_idx(0) % blocks * 64
    bufs = [tv.alloc_shared(tv.f16, [rows, 64]) for _ in range(2)]
    acc = tv.zeros([rows, 64], tv.f32)
    for s in range(2):
        tv.copy_async(bufs[s], gx, [row, 0], multicast=True)
        tv.copy_async_commit()
    for s in range(2):
        tv.copy_async_wait(1 - s)
        tv.sync()
        acc = acc + tv.cast(tv.load_shared(bufs[s], [0, 0], [rows, 64]), tv.f32)
    tv.store_global(tv.global_view(y, [M, 512]), acc, [row, col])


class _FakeBuffer:
    """A CUDA-array-interface object: enough for validate_args, which needs no GPU."""

    def __init__(self, n: int, typestr: str, readonly: bool = False) -> None:
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": typestr, "strides": None,
                                         "data": (1 << 20, readonly), "version": 3}


def _ptx(program) -> str:
    return compile_once(program, "sm_90a").ptx


# ---- the language ------------------------------------------------------------------------

@tv.kernel(num_warps=4)
def misuse(x: tv.ptr(tv.f16, const=True), M: tv.int32, *, case: str = ""):
    """A wrong use of clusters or multicast copies each (`case`)."""
    gx = tv.global_view(x, [M, 64])
    buf = tv.alloc_shared(tv.f16, [64, 64])
    if case == "three":
        tv.cluster(3)
    if case == "twice":
        tv.cluster(2)
        tv.cluster(2)
    if case == "in_loop":
        for _ in tv.range(0, M, 1):
            tv.cluster(2)
    if case in ("no_cluster", "no_producer", "not_bool"):
        if case != "no_cluster":
            tv.cluster(2)
        if case == "not_bool":
            tv.producer_warp()
        tv.copy_async(buf, gx, [0, 0], multicast=1 if case == "not_bool" else True)


@pytest.mark.parametrize("case, message, line", [
    ("three", "takes 2, 4 or 8 blocks, got int 3", "tv.cluster(3)"),
    ("twice", "called twice", "tv.cluster(2)"),
    ("in_loop", "inside a", "tv.cluster(2)"),
    ("no_cluster", "needs tv.cluster", "tv.copy_async(buf"),
    ("no_producer", "needs tv.cluster", "tv.copy_async(buf"),
    ("not_bool", "takes a bool", "tv.copy_async(buf"),
])
def test_clusters_and_multicast_are_checked_at_the_call(case, message, line):
    with pytest.raises(VMError, match=message) as err:
        misuse.specialize(case=case)
    assert line in str(err.value)


@tv.kernel(num_warps=1)
def clustered_copy(x: tv.ptr(tv.f32, const=True), y: tv.ptr(tv.f32), *, blocks: int = 2):
    """y = x, 32 elements a block, the blocks in clusters (nothing shared)."""
    tv.cluster(blocks)
    tv.grid(blocks)
    off = tv.block_idx(0) * 32
    gx, gy = tv.global_view(x, [32 * blocks]), tv.global_view(y, [32 * blocks])
    tv.store_global(gy, tv.load_global(gx, [off], [32]), [off])


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89"])
def test_clusters_need_sm_90_at_the_cluster_line(arch):
    with pytest.raises(VMError, match=f"need sm_90 or newer; compiling for {arch}") as err:
        compile_program(clustered_copy.specialize(), arch)
    assert err.value.loc is not None and "tv.cluster(blocks)" in str(err.value)


def test_clusters_compile_for_sm_90():
    assert ".reqnctapercluster 2" in compile_program(clustered_copy.specialize(), "sm_90").ptx


def test_the_verifier_checks_the_cluster_and_multicast_copies():
    program = pair_sums.specialize()
    verify(program)
    with pytest.raises(VMError, match="cluster must be one of 1, 2, 4, 8"):
        verify(replace(program, cluster=3))
    with pytest.raises(VMError, match="a multicast copy needs the blocks in clusters"):
        verify(replace(program, cluster=1))
    with pytest.raises(VMError, match="a multicast copy needs .* a producer warp"):
        verify(replace(program, producer_warps=0))


def test_a_cluster_program_prints_and_parses_back():
    program = pair_sums.specialize(blocks=4)
    text = format_program(program)
    assert " cluster(4) " in text and "multicast=True" in text
    again = parse_program(text)
    assert again.cluster == 4
    assert format_program(again) == text


def test_the_interpreter_runs_each_block_as_without_the_cluster():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 64)).astype(np.float16)
    y = np.full((128, 512), np.nan, np.float32)
    pair_sums.interpret(x, y, 128, 4, blocks=2)
    want = x.astype(np.float32) * 2  # both buffers hold the same tile
    np.testing.assert_array_equal(y[:, :64], want)
    np.testing.assert_array_equal(y[:, 64:128], want)
    assert np.isnan(y[:, 128:]).all()  # columns no block of this grid owns
    with pytest.raises(VMError, match="clusters of 2 blocks .* is 3, not a multiple of 2"):
        pair_sums.interpret(x, y, 128, 3, blocks=2)  # as the launch refuses it


# ---- the PTX's protocol ------------------------------------------------------------------

def test_the_ptx_of_a_cluster_with_multicast_copies():
    program = pair_sums.specialize(blocks=2)
    compiled = compile_once(program, "sm_90a")
    ptx = compiled.ptx
    assert ".reqnctapercluster 2, 1, 1" in ptx
    # each block fetches its half of the 64 x 256 box, into both blocks' buffers
    copies = re.findall(r"cp\.async\.bulk\.tensor\.2d\S*multicast::cluster \[[^]]+\], "
                        r"\[[^]]+\], \[[^]]+\], %rs\d+;", ptx)
    assert len(copies) == 2
    (spec,) = tensor_maps(compiled.lowered)
    assert spec.box == (64, 32)  # innermost first: 32 of the 64 rows a block
    assert re.search(r"mov\.u32\s+%r\d+, %cluster_ctarank;", ptx)  # the block's rank
    # the releases arrive on both blocks' "empty" barriers, which count 2 x 4 warps
    assert len(re.findall(r"mapa\.shared::cluster\.u32 remote, %r\d+, %r\d+; "
                          r"mbarrier\.arrive\.shared::cluster\.b64 _", ptx)) == 2 * 2
    inits = re.findall(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], (\S+);", ptx)
    counts = [int(c) if c.isdigit() else c for c in inits]
    ring = tma_ring(compiled.lowered)
    assert counts[:ring] == [1] * ring and len(counts) == ring + 2
    # published to the cluster after the init, and met again before every exit
    assert ptx.count("barrier.cluster.arrive.release;") == 3  # init, producer, body


def test_the_ring_covers_the_groups_between_two_fills_of_a_multicast_buffer():
    program = wt_matmul_kernel("f16").specialize(producer=True, lead=2, cluster=2)
    lowered = compile_once(program, "sm_90a").lowered
    assert multicast_refill_bound(lowered) == 4  # x's 4 stages: one group a k-tile
    assert tma_ring(lowered) == 4
    plain = compile_once(
        wt_matmul_kernel("f16").specialize(producer=True, lead=2), "sm_90a").lowered
    assert multicast_refill_bound(plain) == 0 and tma_ring(plain) < 4


def test_the_matmul_shares_x_between_the_blocks_of_a_cluster():
    program = wt_matmul_kernel("f16").specialize(producer=True, wide_stores=True, cluster=2)
    lowered = compile_once(program, "sm_90a").lowered
    copies = [i for i in instructions(lowered.body) if isinstance(i, ins.CopyAsync)]
    assert {i.src.name.split(".")[0] for i in copies if i.multicast} == {"gxt"}
    assert all(not i.multicast for i in copies if i.src.name.startswith("gwt"))
    # the wide epilogue's tile (%s) in the stages' bytes, after the last copy and its
    # wait (split_producer_warp allows it there)
    allocs = [i.out.name for i in instructions(lowered.body) if isinstance(i, ins.AllocShared)]
    assert allocs[-1] == "s" and len(allocs) == 9


def test_a_multicast_box_that_does_not_split_is_refused_at_its_line():
    with pytest.raises(VMError, match="does not split into 8 slices") as err:
        _ptx(pair_sums.specialize(blocks=8, rows=4))  # 4 rows for 8 blocks
    assert "multicast=True" in str(err.value)


def test_the_launch_refuses_a_grid_that_is_not_whole_clusters():
    sig = signature_from_program(pair_sums.specialize(blocks=2))
    assert sig.cluster == 2
    args = [_FakeBuffer(128 * 64, "<f2", True), _FakeBuffer(128 * 512, "<f4"), 128]
    assert grid_for(sig, [*args, 4]) == (4, 1, 1)
    with pytest.raises(ArgumentValueError, match="clusters of 2 blocks .* is 5, not a "
                                                 "multiple of 2"):
        grid_for(sig, [*args, 5])
    assert type(sig).from_json(sig.to_json()) == sig


# ---- on the GPU --------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_clusters_share_x_and_match_float64():

    require_sm90("clusters and TMA multicast")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 64)).astype(np.float16)
    for blocks in (2, 4, 8):
        want = np.full((128, 512), np.nan, np.float32)
        pair_sums.interpret(x, want, 128, 2 * blocks, blocks=blocks)
        got = np.full((128, 512), np.nan, np.float32)
        launch_program(pair_sums.specialize(blocks=blocks), [x, got, 128, 2 * blocks])
        np.testing.assert_array_equal(got, want)
    k = wt_matmul_kernel("f16")
    # ragged M and N (an odd number of column tiles: the cluster's last block past N),
    # K past whole loop iterations
    for M, N, K, kw in ((300, 200, 1088, dict(cluster=2, lead=3)),
                        (257, 392, 4096, dict(cluster=2, wide_stores=True)),
                        (520, 1000, 640, dict(cluster=4, wide_stores=True))):
        x = rng.standard_normal((M, K)).astype(np.float16)
        wt = rng.standard_normal((N, K)).astype(np.float16)
        y = np.full((M, N), np.nan, np.float16)
        launch_program(k.specialize(producer=True, **kw), [x, wt, y, M, N, K])
        ref = x.astype(np.float64) @ wt.astype(np.float64).T
        bound = 2.0 ** -11 * np.abs(ref).max() + K * 2.0 ** -24 * np.abs(ref).max()
        assert np.abs(y - ref).max() <= bound, (M, N, K, kw)
