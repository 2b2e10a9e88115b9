"""Blocks of a cluster reading each other's shared memory (`tv.load_shared(...,
peer=)`) after a cluster barrier (`tv.cluster_sync()`): the interpreter's semantics
(vm/interp_cluster.py) against numpy, the races and deadlocks it reports at the
program's lines, what the verifier refuses, the IR's text form, the PTX, and on an H100
the same programs against numpy."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from kernel_harness import compile_once, require_sm90

from tilevm.backend.analysis.shared_memory import shared_plan
from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.parser import parse_program
from tilevm.ir.printer import format_program
from tilevm.ir.transform import instructions
from tilevm.ir.verifier import verify
from tilevm.layouts import local, spatial
from tilevm.layouts.fragments import mma_m16n8k16_a
from tilevm.vm import lang as tv
from tilevm.vm.interpreter import run


@tv.kernel(num_warps=4)
def cluster_sum(x: tv.ptr(tv.f32, const=True), y: tv.ptr(tv.f32), G: tv.int32, *,
                blocks: int = 2, rows: int = 64):
    """Block r of cluster c holds part r of x [G, rows, 32] (G = clusters x blocks); the
    cluster's sum of its parts, in rank order, goes to y [G / blocks, rows, 32], each
    block adding up rows / blocks of the rows: the split-K reduction's shape."""
    tv.cluster(blocks)
    tv.grid(G)
    gx = tv.global_view(x, [G * rows, 32])
    gy = tv.global_view(y, [G // blocks * rows, 32])
    part = tv.alloc_shared(tv.f32, [rows, 32])
    tv.store_shared(part, tv.load_global(gx, [tv.block_idx(0) * rows, 0], [rows, 32]))
    tv.cluster_sync()
    rank = tv.block_idx(0) % blocks
    mine = rows // blocks
    total = tv.zeros([mine, 32], tv.f32)
    for r in range(blocks):  # every block adds the parts in the same order
        total = total + tv.load_shared(part, [rank * mine, 0], [mine, 32], peer=r)
    tv.store_global(gy, total, [tv.block_idx(0) // blocks * rows + rank * mine, 0])


@tv.kernel(num_warps=4)
def unordered(y: tv.ptr(tv.f32), G: tv.int32, *, barrier: bool = False, rewrite: int = 0):
    """Each block writes its tile and reads its peer's. Without the barrier the read is
    a race; with it, writing the tile again before a second barrier is one: after both
    blocks read (`rewrite=1`: the second block's read finds the first's new values) or
    while the other reads (`rewrite=2`: only rank 1 writes, only rank 0 reads)."""
    tv.cluster(2)
    tv.grid(G)
    buf = tv.alloc_shared(tv.f32, [64, 32])
    tv.store_shared(buf, tv.full([64, 32], 1.0, tv.f32))
    if barrier:
        tv.cluster_sync()
    rank = tv.block_idx(0) % 2
    if rewrite == 2:
        if rank == 1:
            tv.store_shared(buf, tv.full([64, 32], 3.0, tv.f32))  # while rank 0 reads it
        other = tv.load_shared(buf, [0, 0], [64, 32], peer=1)
    else:
        other = tv.load_shared(buf, [0, 0], [64, 32], peer=1 - rank)
        if rewrite == 1:
            tv.store_shared(buf, other + 1.0)
    tv.store_global(tv.global_view(y, [G * 64, 32]), other, [tv.block_idx(0) * 64, 0])


@tv.kernel(num_warps=4)
def uneven_barriers(y: tv.ptr(tv.f32), G: tv.int32):
    """Only the even blocks reach the barrier: the odd ones end without it."""
    tv.cluster(2)
    tv.grid(G)
    buf = tv.alloc_shared(tv.f32, [64, 32])
    tv.store_shared(buf, tv.full([64, 32], 2.0, tv.f32))
    tv.sync()
    if tv.block_idx(0) % 2 == 0:
        tv.cluster_sync()
    tv.store_global(tv.global_view(y, [G * 64, 32]), tv.load_shared(buf, [0, 0], [64, 32]),
                    [tv.block_idx(0) * 64, 0])


@tv.kernel(num_warps=4)
def peer_rank(y: tv.ptr(tv.f32), G: tv.int32, *, rank: int = 2):
    tv.cluster(2)
    tv.grid(G)
    buf = tv.alloc_shared(tv.f32, [64, 32])
    tv.store_shared(buf, tv.full([64, 32], 2.0, tv.f32))
    tv.cluster_sync()
    tv.store_global(tv.global_view(y, [G * 64, 32]),
                    tv.load_shared(buf, [0, 0], [64, 32], peer=rank),
                    [tv.block_idx(0) * 64, 0])


@tv.kernel(num_warps=4)
def no_clusters(y: tv.ptr(tv.f32), *, peer: bool = False):
    tv.grid(1)
    buf = tv.alloc_shared(tv.f32, [64, 32])
    tv.store_shared(buf, tv.full([64, 32], 2.0, tv.f32))
    if peer:
        r = tv.load_shared(buf, [0, 0], [64, 32], peer=0)
    else:
        tv.cluster_sync()
        r = tv.load_shared(buf, [0, 0], [64, 32])
    tv.store_global(tv.global_view(y, [64, 32]), r, [0, 0])


@tv.kernel(num_warps=4)
def halves_of_a_peer(x: tv.ptr(tv.f16, const=True), y: tv.ptr(tv.f16), G: tv.int32):
    """16-bit tiles shaped for `ldmatrix` (an mma operand layout), the block's own and
    its peer's, added; a shared tensor freed after the peer reads it, and a later one."""
    tv.cluster(2)
    tv.grid(G)
    gx = tv.global_view(x, [G * 64, 64])
    buf = tv.alloc_shared(tv.f16, [64, 64])
    tv.store_shared(buf, tv.load_global(gx, [tv.block_idx(0) * 64, 0], [64, 64]))
    tv.cluster_sync()
    frag = spatial(4, 1) * local(1, 4) * mma_m16n8k16_a()
    mine = tv.load_shared(buf, [0, 0], [64, 64], layout=frag)
    a = tv.load_shared(buf, [0, 0], [64, 64], layout=frag, peer=1 - tv.block_idx(0) % 2)
    tv.free_shared(buf)
    later = tv.alloc_shared(tv.f16, [64, 64])
    tv.store_shared(later, a + mine)
    tv.sync()
    tv.store_global(tv.global_view(y, [G * 64, 64]), tv.load_shared(later, [0, 0], [64, 64]),
                    [tv.block_idx(0) * 64, 0])


def _sum_reference(x: np.ndarray, blocks: int, rows: int) -> np.ndarray:
    parts = x.reshape(-1, blocks, rows, 32)
    total = parts[:, 0]
    for r in range(1, blocks):
        total = total + parts[:, r]
    return total.reshape(-1, 32)


@pytest.mark.parametrize("blocks", [2, 4])
def test_a_cluster_adds_its_blocks_parts_in_rank_order(blocks):
    rng = np.random.default_rng(blocks)
    G, rows = 3 * blocks, 64
    x = rng.standard_normal((G * rows, 32)).astype(np.float32)
    y = np.zeros((G // blocks * rows, 32), np.float32)
    run(cluster_sum.specialize(blocks=blocks, rows=rows), [x, y, G])
    assert np.array_equal(y, _sum_reference(x, blocks, rows))


def test_a_read_of_a_peer_without_a_cluster_barrier_is_a_race_at_its_line():
    y = np.zeros((128, 32), np.float32)
    with pytest.raises(VMError, match="cluster race on %buf: .*no cluster_sync") as info:
        run(unordered.specialize(barrier=False), [y, 2])
    assert info.value.loc.line == _line(unordered, "peer=1 - rank)")


def test_writing_a_tile_a_peer_reads_before_the_next_barrier_is_a_race():
    y = np.zeros((128, 32), np.float32)
    run(unordered.specialize(barrier=True), [y, 2])
    assert (y == 1.0).all()
    with pytest.raises(VMError, match=r"cluster race on %buf\[0, 0\]: the peer block wrote "
                                      r"it at .*:\d+ \(store_shared\) and block \(1, 0, 0\) "
                                      r"reads it without a cluster_sync between") as info:
        run(unordered.specialize(barrier=True, rewrite=1), [y, 2])
    assert info.value.loc.line == _line(unordered, "peer=1 - rank)")
    with pytest.raises(VMError, match=r"cluster race on %buf: a peer block read it at .*:\d+ "
                                      r"\(load_shared\) and block \(1, 0, 0\) writes it "
                                      r"without a cluster_sync between") as info:
        run(unordered.specialize(barrier=True, rewrite=2), [y, 2])
    assert info.value.loc.line == _line(unordered, "# while rank 0 reads it")


def test_a_barrier_some_blocks_never_reach_is_a_deadlock_at_its_line():
    y = np.zeros((128, 32), np.float32)
    with pytest.raises(VMError, match=r"deadlock: block \(0, 0, 0\) waits at cluster "
                                      r"barrier 1 .* block\(s\) \[\(1, 0, 0\)\]") as info:
        run(uneven_barriers.specialize(), [y, 2])
    assert info.value.loc.line == _line(uneven_barriers, "tv.cluster_sync()")


def test_a_peer_outside_the_cluster_is_an_error():
    y = np.zeros((128, 32), np.float32)
    with pytest.raises(VMError, match=r"peer 2 is not a block of the cluster: ranks are "
                                      r"0 \.\. 1"):
        run(peer_rank.specialize(rank=2), [y, 2])
    run(peer_rank.specialize(rank=1), [y, 2])  # a block's own rank reads its own
    assert (y == 2.0).all()


@pytest.mark.parametrize("peer", [False, True])
def test_cluster_barriers_and_peers_need_clusters(peer):
    what = "load_shared: a peer's shared memory" if peer else "cluster_sync"
    with pytest.raises(VMError, match=f"{re.escape(what)}.* needs the blocks in clusters"):
        verify(no_clusters.specialize(peer=peer))


def test_the_text_form_keeps_the_peer_and_the_barrier():
    program = cluster_sum.specialize(blocks=4)
    text = format_program(program)
    assert "cluster_sync" in text and "peer=" in text
    assert format_program(parse_program(text)) == text


def test_the_ptx_maps_the_peers_buffer_and_meets_at_cluster_barriers():
    ptx = compile_once(cluster_sum.specialize(blocks=2), "sm_90a").ptx
    assert ptx.count("mapa.shared::cluster") == 2  # once a peer load, before its loads
    assert re.search(r"ld\.shared::cluster\.v4\.b32", ptx)
    # the program's barrier and the one before the blocks exit
    assert ptx.count("barrier.cluster.arrive.release;") == 2
    assert ptx.count("barrier.cluster.wait.acquire;") == 2


def test_a_peer_read_is_never_ldmatrix_and_its_tensor_lives_to_the_end():
    program = compile_once(halves_of_a_peer.specialize(), "sm_90a").lowered
    loads = [i for i in instructions(program.body) if isinstance(i, ins.LoadShared)]
    peer, own = [i for i in loads if i.peer is not None], [i for i in loads if i.peer is None]
    assert all(i.lowering is None or i.lowering.name != "ldmatrix" for i in peer)
    assert any(i.lowering is not None and i.lowering.name == "ldmatrix" for i in own)
    plan = shared_plan(program)
    (buf, later), size = sorted(plan.allocations.items()), 64 * 64 * 2
    starts = sorted(a.offset for _, a in (buf, later))
    assert starts[1] - starts[0] >= size  # the later tensor does not reuse its bytes
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4 * 64, 64)).astype(np.float16)
    y = np.zeros_like(x)
    run(halves_of_a_peer.specialize(), [x, y, 4])
    pairs = x.reshape(2, 2, 64, 64)
    assert np.array_equal(y.reshape(2, 2, 64, 64), pairs[:, ::-1] + pairs)


def _line(kernel, text: str) -> int:
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


# ---- on the GPU ------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("blocks", [2, 4, 8])
def test_gpu_a_cluster_adds_its_blocks_parts(blocks):
    from tilevm.backend.launch import launch_program
    require_sm90("clusters")
    rng = np.random.default_rng(blocks)
    G, rows = 66 * blocks, 64
    x = rng.standard_normal((G * rows, 32)).astype(np.float32)
    y = np.zeros((G // blocks * rows, 32), np.float32)
    program = cluster_sum.specialize(blocks=blocks, rows=rows)
    for _ in range(3):  # repeated: every launch the same bits
        launch_program(program, [x, y, G])
        assert np.array_equal(y, _sum_reference(x, blocks, rows))
