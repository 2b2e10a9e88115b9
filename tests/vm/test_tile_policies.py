"""Tile-synchronization policies (vm/tile_policies.py): their maps against brute force,
the host checks (an unsatisfiable wait, a cycle of kernels) with clear errors, and a
row-synchronized producer/consumer pair in the interpreter agreeing with serialized
runs under adversarial interleavings."""

from __future__ import annotations

import numpy as np
import pytest

from tilevm.vm import lang as tv
from tilevm.vm.interpreter import run, run_together
from tilevm.vm.tile_policies import TilePolicyError

B = 16  # tile edge


def test_the_policies_maps():
    assert tv.TileSync().waited(5) == [5] and tv.TileSync().post_index(5) == 5
    assert tv.StridedSync(4, 3).waited(1) == [1, 5, 9]
    assert tv.AffineSync(2, 1, 3, 2).waited(4) == [9, 12]
    row = tv.RowSync(columns=3)
    assert [row.post_index(t) for t in range(7)] == [0, 0, 0, 1, 1, 1, 2]
    assert row.waited(2) == [2] and row.posts() == 3 and row.semaphores(7) == 3
    assert tv.tile_of(7, 3) == (2, 1)


def test_check_policy_accepts_what_the_producer_posts_and_names_what_it_cannot():
    tv.check_policy(tv.RowSync(columns=4), producer_tiles=32, consumer_tiles=8)
    tv.check_policy(tv.StridedSync(8, 4), producer_tiles=32, consumer_tiles=8)
    with pytest.raises(TilePolicyError, match="consumer tile 8 waits for semaphore 8, "
                                              "which the 32 producer tiles post to 0 times"):
        tv.check_policy(tv.RowSync(columns=4), producer_tiles=32, consumer_tiles=9)
    with pytest.raises(TilePolicyError, match="consumer tile 8 waits for semaphore 32"):
        tv.check_policy(tv.StridedSync(8, 4), producer_tiles=32, consumer_tiles=9)
    # a ragged last row: 30 tiles of 4 columns post 2 times to row 7, which waits for 4
    with pytest.raises(TilePolicyError, match="post to 2 times of the 4 it waits for"):
        tv.check_policy(tv.RowSync(columns=4), producer_tiles=30, consumer_tiles=8)
    with pytest.raises(TilePolicyError, match="at least one producer tile"):
        tv.AffineSync(count=0)


def test_check_sync_graph_rejects_a_producer_that_waits_on_its_consumer():
    tv.check_sync_graph({"down": ["gate_up"], "gate_up": []})
    tv.check_sync_graph({"c": ["a", "b"], "b": ["a"]})
    with pytest.raises(TilePolicyError, match="gate_up -> down -> gate_up"):
        tv.check_sync_graph({"gate_up": ["down"], "down": ["gate_up"]})
    with pytest.raises(TilePolicyError, match="a -> c -> b -> a"):
        tv.check_sync_graph({"a": ["c"], "c": ["b"], "b": ["a"]})


@tv.kernel(num_warps=1)
def rows_producer(x: tv.ptr(tv.f32, const=True), h: tv.ptr(tv.f32), sem: tv.ptr(tv.int32),
                  rows: tv.int32, *, columns: int):
    """Tile (r, c) of h = 2 x + 1, then a post to row r's semaphore."""
    policy = tv.RowSync(columns)
    tv.grid(rows * columns)
    r, c = tv.tile_of(tv.block_idx(0), columns)
    gx = tv.global_view(x, [rows * B, columns * B])
    gh = tv.global_view(h, [rows * B, columns * B])
    tile = tv.load_global(gx, [r * B, c * B], [B, B])
    tv.store_global(gh, tile * 2.0 + 1.0, [r * B, c * B])
    policy.post(tv.global_view(sem, [rows]), tv.block_idx(0))


@tv.kernel(num_warps=1)
def rows_consumer(h: tv.ptr(tv.f32), sem: tv.ptr(tv.int32), out: tv.ptr(tv.f32),
                  rows: tv.int32, generation: tv.int32, *, columns: int):
    """Row r of out = the sum of row block r of h over its columns (all its tiles)."""
    policy = tv.RowSync(columns)
    tv.grid(rows)
    r = tv.block_idx(0)
    policy.wait(tv.global_view(sem, [rows]), r, generation)
    block = tv.load_global(tv.global_view(h, [rows * B, columns * B]), [r * B, 0],
                           [B, columns * B])
    tv.store_global(tv.global_view(out, [rows * B]), tv.sum(block, 1), [r * B])


@pytest.mark.parametrize("seed", range(12))
def test_row_synchronized_pair_agrees_with_serialized_runs(seed):
    rng = np.random.default_rng(seed)
    rows, columns = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    tv.check_policy(tv.RowSync(columns), rows * columns, rows)
    x = rng.standard_normal((rows * B, columns * B)).astype(np.float32)
    make = rows_producer.specialize(columns=columns)
    use = rows_consumer.specialize(columns=columns)

    def buffers():
        return (np.zeros_like(x), np.zeros(rows, np.int32),
                np.full(rows * B, np.nan, np.float32))

    h, sem, serial = buffers()
    run(make, [x, h, sem, rows])
    run(use, [h, sem, serial, rows, 1])
    h, sem, out = buffers()
    for generation in (1, 2):  # twice: the semaphores are not reset
        out[:] = np.nan
        run_together([(use, [h, sem, out, rows, generation]), (make, [x, h, sem, rows])],
                     seed=seed * 10 + generation)
        assert np.array_equal(out, serial)
    assert (sem == 2 * columns).all()


@tv.kernel(num_warps=1)
def persistent_pair(x: tv.ptr(tv.f32, const=True), h: tv.ptr(tv.f32), sem: tv.ptr(tv.int32),
                    counter: tv.ptr(tv.int32), out: tv.ptr(tv.f32), rows: tv.int32,
                    generation: tv.int32, *, columns: int):
    """rows_producer's and rows_consumer's tiles in one grid: tickets below
    rows * columns produce, the others consume (topological order)."""
    policy = tv.RowSync(columns)
    producer_tiles = rows * columns
    tv.grid(producer_tiles + rows)
    ticket = tv.take_ticket(tv.global_view(counter, [1]), generation, producer_tiles + rows)
    gh = tv.global_view(h, [rows * B, columns * B])
    gs = tv.global_view(sem, [rows])
    if ticket < producer_tiles:
        r, c = tv.tile_of(ticket, columns)
        tile = tv.load_global(tv.global_view(x, [rows * B, columns * B]), [r * B, c * B],
                              [B, B])
        tv.store_global(gh, tile * 2.0 + 1.0, [r * B, c * B])
        policy.post(gs, ticket)
    else:
        r = ticket - producer_tiles
        policy.wait(gs, r, generation)
        block = tv.load_global(gh, [r * B, 0], [B, columns * B])
        tv.store_global(tv.global_view(out, [rows * B]), tv.sum(block, 1), [r * B])


@pytest.mark.parametrize("seed", range(8))
def test_a_persistent_grid_with_tickets_agrees_and_needs_no_reset(seed):
    rng = np.random.default_rng(seed)
    rows, columns = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    x = rng.standard_normal((rows * B, columns * B)).astype(np.float32)
    h, sem, serial = (np.zeros_like(x), np.zeros(rows, np.int32),
                      np.full(rows * B, np.nan, np.float32))
    run(rows_producer.specialize(columns=columns), [x, h, sem, rows])
    run(rows_consumer.specialize(columns=columns), [h, sem, serial, rows, 1])
    program = persistent_pair.specialize(columns=columns)
    h, sem, counter = np.zeros_like(x), np.zeros(rows, np.int32), np.zeros(1, np.int32)
    for generation in (1, 2, 3):
        out = np.full(rows * B, np.nan, np.float32)
        run_together([(program, [x, h, sem, counter, out, rows, generation])],
                     seed=seed * 10 + generation)
        assert np.array_equal(out, serial)
    assert counter[0] == 3 * (rows * columns + rows) and (sem == 3 * columns).all()
