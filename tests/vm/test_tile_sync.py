"""tile_post / tile_wait in the interpreter, the CPU specification of tile-level
synchronization (docs/tile-sync.md): a producer and a consumer run together under
seeded adversarial interleavings give what running them one after the other gives; a
missing post is a deadlock reported at the wait's line; a semaphore needs no reset
between calls (generations); bad semaphores are refused with the user's line."""

from __future__ import annotations

import numpy as np
import pytest

from tilevm.ir.errors import VMError
from tilevm.vm import lang as tv
from tilevm.vm.interpreter import run, run_together

BLOCK = 32


@tv.kernel(num_warps=1)
def producer(x: tv.ptr(tv.f32, const=True), h: tv.ptr(tv.f32), sem: tv.ptr(tv.int32),
             n: tv.int32, *, skip: int = -1, early: bool = False):
    tv.grid(tv.cdiv(n, BLOCK))
    if early:  # let a dependent consumer start once every producer block got here
        tv.launch_dependents()
    t = tv.block_idx(0)
    gh = tv.global_view(h, [n])
    v = tv.load_global(tv.global_view(x, [n]), [t * BLOCK], [BLOCK])
    tv.store_global(gh, v * 2.0 + 1.0, [t * BLOCK])
    if t != skip:  # (a producer that forgets one post, for the deadlock test)
        tv.tile_post(tv.global_view(sem, [tv.cdiv(n, BLOCK)]), [t], 1)


@tv.kernel(num_warps=1)
def consumer(h: tv.ptr(tv.f32), sem: tv.ptr(tv.int32), out: tv.ptr(tv.f32), n: tv.int32,
             generation: tv.int32):
    """Each tile reads its own producer tile and the next one (a row of two)."""
    tiles = tv.cdiv(n, BLOCK)
    tv.grid(tiles)
    t = tv.block_idx(0)
    gs = tv.global_view(sem, [tiles])
    gh = tv.global_view(h, [n])
    tv.tile_wait(gs, [t], generation)
    nxt = tv.minimum(t + 1, tiles - 1)
    tv.tile_wait(gs, [nxt], generation)
    a = tv.load_global(gh, [t * BLOCK], [BLOCK])
    b = tv.load_global(gh, [nxt * BLOCK], [BLOCK])
    tv.store_global(tv.global_view(out, [n]), a + b, [t * BLOCK])


def launches(x, h, sem, out, generation, skip=-1):
    n = x.size
    return [(producer.specialize(skip=skip), [x, h, sem, n]),
            (consumer.specialize(), [h, sem, out, n, generation])]


def expected_output(x):
    h = (x.astype(np.float32) * 2 + 1).astype(np.float32)
    nxt = np.minimum(np.arange(len(x)) // BLOCK + 1, (len(x) - 1) // BLOCK)
    return h + h[nxt * BLOCK + np.arange(len(x)) % BLOCK].astype(np.float32) \
        if len(x) % BLOCK == 0 else None


@pytest.mark.parametrize("seed", range(40))
def test_adversarial_interleavings_agree_with_serialized_runs(seed):
    rng = np.random.default_rng(seed)
    n = BLOCK * int(rng.integers(2, 7)) - int(rng.integers(0, BLOCK))  # ragged
    x = rng.standard_normal(n).astype(np.float32)
    serial = [np.zeros(n, np.float32), np.zeros(-(-n // BLOCK), np.int32),
              np.zeros(n, np.float32)]
    for program, args in launches(x, *serial, generation=1):
        run(program, args)
    h, sem, out = np.zeros(n, np.float32), np.zeros(-(-n // BLOCK), np.int32), \
        np.full(n, np.nan, np.float32)
    run_together(launches(x, h, sem, out, generation=1), seed=seed)
    assert np.array_equal(out, serial[2]) and np.array_equal(h, serial[0])
    assert np.array_equal(sem, serial[1]) and (sem == 1).all()


def test_the_consumer_first_in_order_still_completes():
    x = np.arange(4 * BLOCK, dtype=np.float32)
    h, sem, out = np.zeros_like(x), np.zeros(4, np.int32), np.zeros_like(x)
    pair = launches(x, h, sem, out, generation=1)
    run_together(pair[::-1])  # in order: every consumer block waits, then producers run
    assert np.array_equal(out, expected_output(x))


def test_generations_need_no_reset_between_calls():
    x = np.arange(3 * BLOCK, dtype=np.float32)
    h, sem, out = np.zeros_like(x), np.zeros(3, np.int32), np.zeros_like(x)
    for generation in (1, 2, 3):
        x += 1
        run_together(launches(x, h, sem, out, generation), seed=generation)
        assert np.array_equal(out, expected_output(x))
    assert (sem == 3).all()


def test_a_wait_survives_the_counter_wrapping_around():
    x = np.arange(2 * BLOCK, dtype=np.float32)
    h, out = np.zeros_like(x), np.zeros_like(x)
    sem = np.full(2, 2**31 - 1, np.int32)  # the next post wraps to -2^31
    run_together(launches(x, h, sem, out, generation=-2**31), seed=3)
    assert np.array_equal(out, expected_output(x)) and (sem == -2**31).all()


@pytest.mark.parametrize("seed", [None, 0, 1, 2])
def test_a_missing_post_is_a_deadlock_at_the_waits_line(seed):
    x = np.arange(4 * BLOCK, dtype=np.float32)
    h, sem, out = np.zeros_like(x), np.zeros(4, np.int32), np.zeros_like(x)
    with pytest.raises(VMError) as caught:
        run_together(launches(x, h, sem, out, generation=1, skip=2), seed=seed)
    message = str(caught.value)
    assert "deadlock: block" in message and "to reach 1, it holds 0" in message
    assert "test_tile_sync.py" in message and "tv.tile_wait(gs" in message


def test_a_wait_in_one_kernel_alone_is_a_deadlock_not_a_hang():
    x = np.arange(2 * BLOCK, dtype=np.float32)
    h, sem, out = np.zeros_like(x), np.zeros(2, np.int32), np.zeros_like(x)
    with pytest.raises(VMError, match="deadlock: block \\(0, 0, 0\\) waits"):
        run(consumer.specialize(), [h, sem, out, x.size, 1])


def test_semaphores_must_be_int32_and_writable():
    @tv.kernel(num_warps=1)
    def wrong_type(sem: tv.ptr(tv.f32)):
        tv.grid(1)
        tv.tile_post(tv.global_view(sem, [4]), [0], 1)

    with pytest.raises(VMError, match="tv.tile_post needs an int32 semaphore tensor"):
        wrong_type.specialize()

    @tv.kernel(num_warps=1)
    def readonly(sem: tv.ptr(tv.int32, const=True)):
        tv.grid(1)
        tv.tile_post(tv.global_view(sem, [4]), [0], 1)

    with pytest.raises(VMError, match="store to read-only parameter sem"):
        run(readonly.specialize(), [np.zeros(4, np.int32)])

    @tv.kernel(num_warps=1)
    def outside(sem: tv.ptr(tv.int32)):
        tv.grid(1)
        tv.tile_wait(tv.global_view(sem, [4]), [4], 0)

    with pytest.raises(VMError, match="tile_wait: the element at \\[4\\] is outside"):
        run(outside.specialize(), [np.zeros(4, np.int32)])


@tv.kernel(num_warps=1)
def consumer_without_waits(h: tv.ptr(tv.f32), sem: tv.ptr(tv.int32), out: tv.ptr(tv.f32),
                           n: tv.int32, generation: tv.int32):
    tiles = tv.cdiv(n, BLOCK)
    tv.grid(tiles)
    t = tv.block_idx(0)
    gh = tv.global_view(h, [n])
    nxt = tv.minimum(t + 1, tiles - 1)
    a = tv.load_global(gh, [t * BLOCK], [BLOCK])
    b = tv.load_global(gh, [nxt * BLOCK], [BLOCK])
    tv.store_global(tv.global_view(out, [n]), a + b, [t * BLOCK])


def test_a_consumer_without_its_waits_is_a_race_at_its_load():
    """Fault injection: the same consumer without its waits. Whatever the interleaving
    (even in order, where the values happen to be right), its loads of h are ordered
    after the producer's stores by nothing: a race, at the load's line, naming the
    store's."""
    x = np.arange(4 * BLOCK, dtype=np.float32)
    for seed in [None, *range(10)]:
        h, sem, out = np.zeros_like(x), np.zeros(4, np.int32), np.zeros_like(x)
        producer_launch, _ = launches(x, h, sem, out, generation=1)
        with pytest.raises(VMError, match="race on global memory: block .* reads byte .* "
                                          "of h, which block .* wrote at .*:28 "
                                          "\\(store_global\\)") as caught:
            run_together([producer_launch, (consumer_without_waits.specialize(),
                                            [h, sem, out, x.size, 1])], seed=seed)
        assert "tv.load_global(gh, [t * BLOCK], [BLOCK])" in str(caught.value) or \
            "tv.load_global(gh, [nxt * BLOCK], [BLOCK])" in str(caught.value)


def test_the_adversarial_interleavings_reach_the_races():
    """The same consumer without waits and without the race check (values compared):
    some seeds read tiles the producer has not written yet."""
    x = np.arange(4 * BLOCK, dtype=np.float32)
    wrong = 0
    for seed in range(20):
        h, sem, out = np.zeros_like(x), np.zeros(4, np.int32), np.zeros_like(x)
        producer_launch, _ = launches(x, h, sem, out, generation=1)
        run_together([producer_launch, (consumer_without_waits.specialize(),
                                        [h, sem, out, x.size, 1])], seed=seed,
                     check_global_races=False)
        wrong += not np.array_equal(out, expected_output(x))
    assert wrong >= 5


def test_atomics_order_the_split_k_reduction():
    """The race check accepts the library's split-K kernel, whose last block of a tile
    reads the others' partial sums after their atomic counts (acquire and release on
    the counter), and gives the ordinary run's result."""
    from tilevm.kernels import schedule as sch
    from tilevm.kernels.qmm_problem import qmm_problem

    s = sch.Schedule(bm=16, bk=64, num_warps=2, split_k=4, swap_ab=True)
    program, (_, gate) = qmm_problem(s, "int4", 16, 256, 1024)
    alone = [a.copy() if isinstance(a, np.ndarray) else a for a in gate]
    together = [a.copy() if isinstance(a, np.ndarray) else a for a in gate]
    run(program, alone)
    run_together([(program, together)], seed=4)
    assert np.array_equal(alone[4], together[4], equal_nan=True)


def test_a_program_with_a_producer_warp_cannot_synchronize_tiles():
    @tv.kernel(num_warps=4)
    def split(sem: tv.ptr(tv.int32), x: tv.ptr(tv.f16, const=True)):
        tv.grid(1)
        tv.producer_warp()
        tv.tile_wait(tv.global_view(sem, [1]), [0], 1)

    with pytest.raises(VMError, match="tile_wait: a program with a producer warp cannot "
                                      "synchronize tiles") as caught:
        run(split.specialize(), [np.zeros(1, np.int32), np.zeros(8, np.float16)])
    assert "test_tile_sync.py" in str(caught.value)


def test_too_many_waiting_blocks_at_once_is_a_clear_error(monkeypatch):
    """Each started block holds a thread; past `MAX_THREADS` at once the run stops with
    an error saying so, not a hang or a crash."""
    from tilevm.vm import interp_blocks

    monkeypatch.setattr(interp_blocks, "MAX_THREADS", 2)
    x = np.arange(4 * BLOCK, dtype=np.float32)
    h, sem, out = np.zeros_like(x), np.zeros(4, np.int32), np.zeros_like(x)
    with pytest.raises(VMError, match="more than 2 blocks are started and unfinished"):
        run_together(launches(x, h, sem, out, generation=1)[::-1])  # consumers wait first
