"""The stream-K quantized matmul (`kernels.qmm_streamk`) in the interpreter against a
float64 reference: blocks sharing the tiles' units evenly, segments that start and end
inside tiles, ragged M, N and K, zero points, half atoms, every look-ahead reaching into
the next tile; nothing stored past y, the tile counts left at zero; and the shares'
arithmetic (`streamk_slots`) against a direct count."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import qmm_problem, qmm_tolerance

from tilevm.kernels.qmm_streamk import (
    owner,
    qmm_streamk_kernel,
    streamk_slots,
    streamk_units,
)
from tilevm.vm import interpreter

GUARD = 64  # NaN elements after y: a store past its M x N elements would overwrite them


def _interpret(x, qw, blocks: int, **constants) -> np.ndarray:
    K, N = qw.shape
    M = x.shape[0]
    bm, bk, stages = constants["bm"], constants.get("bk", 64), constants["stages"]
    bn = (16 if constants.get("half_atoms") else 32) * constants.get("num_warps", 4)
    tiles, units = streamk_units(M, N, K, bm, bn, stages * bk)
    slots = streamk_slots(tiles, units, blocks)
    ws = np.full(slots * tiles * bm * bn, np.nan, np.float32)
    counters = np.zeros(tiles, np.int32)
    buffer = np.full(M * N + GUARD, np.nan, np.float16)
    zeros = qw.zeros if qw.zeros is not None else qw.scales
    qmm_streamk_kernel("f16").interpret(
        x, qw.packed, qw.scales, zeros, buffer[:M * N], ws, counters, M, N, K, blocks,
        slots, wdtype=qw.dtype, group_size=qw.group_size, has_zeros=qw.zeros is not None,
        **constants)
    assert not counters.any()  # left at zero for the next call
    assert np.isnan(buffer[M * N:]).all()  # nothing stored past y's M x N
    return buffer[:M * N].reshape(M, N)


@pytest.mark.parametrize("wdtype, zeros, M, N, K, g, constants, blocks", [
    # 2 x 2 tiles of 2 units: one block (every tile whole), shares of 2, 3 and 5 units
    # that start and end inside tiles, and one block a unit
    ("int4", False, 40, 200, 512, 64, dict(bm=32, stages=4, lead=2, prefetch=2), 1),
    ("int4", False, 40, 200, 512, 64, dict(bm=32, stages=4, lead=2, prefetch=2), 3),
    ("int4", False, 40, 200, 512, 64, dict(bm=32, stages=4, lead=2, prefetch=2), 5),
    ("int4", False, 40, 200, 512, 64, dict(bm=32, stages=4, lead=2, prefetch=2), 8),
    # K = 4.5 units of 128 rows: a tile's last unit runs past K; the codes four ahead
    # of two stages' units reach two units on
    ("uint3", True, 9, 40, 576, 64, dict(bm=16, stages=2, lead=1, prefetch=2), 4),
    ("uint4", True, 17, 72, 576, 64, dict(bm=16, stages=4, lead=3, prefetch=4), 3),
    # half atoms (64 columns a block), three stages, 6-bit codes
    ("f6e3m2", False, 33, 136, 768, 128, dict(bm=64, stages=3, lead=2, prefetch=3,
                                             half_atoms=True), 5),
    ("int8", False, 8, 100, 1024, 128, dict(bm=8, stages=4, lead=2, prefetch=4,
                                            half_atoms=True), 7),
    # two warpgroups of half atoms: 128 columns a block
    ("int4", False, 24, 264, 1024, 128,
     dict(bm=16, num_warps=8, stages=4, lead=2, prefetch=4, half_atoms=True), 6),
])
def test_stream_k_matches_float64_in_the_interpreter(wdtype, zeros, M, N, K, g, constants,
                                                     blocks):
    x, qw, ref = qmm_problem(wdtype, M, N, K, g, zeros, seed=blocks)
    y = _interpret(x, qw, blocks, **constants)
    assert np.abs(y.astype(np.float64) - ref).max() <= qmm_tolerance(x, qw, ref)


def test_stream_k_does_not_depend_on_which_block_finishes_last():
    """Blocks run in seeded random orders (`interpreter.run_together`: a different block
    is last to park its part of a shared tile each time) give y bitwise equal to the
    in-order run: the parts are added in block order, not arrival order."""
    x, qw, _ = qmm_problem("int4", 40, 200, 512, 64, False)
    constants = dict(wdtype=qw.dtype, group_size=64, has_zeros=False, bm=32, bk=64,
                     num_warps=4, stages=4, lead=2, prefetch=2)
    program = qmm_streamk_kernel("f16").specialize(**constants)
    tiles, units = streamk_units(40, 200, 512, 32, 128, 256)
    blocks = 5
    slots = streamk_slots(tiles, units, blocks)
    outputs = []
    for seed in (None, 1, 2, 3):
        y = np.full(40 * 200, np.nan, np.float16)
        counters = np.zeros(tiles, np.int32)
        args = [x, qw.packed, qw.scales, qw.scales, y,
                np.full(slots * tiles * 32 * 128, np.nan, np.float32), counters,
                40, 200, 512, blocks, slots]
        if seed is None:
            interpreter.run(program, args)
        else:
            interpreter.run_together([(program, args)], seed=seed)
        assert not counters.any()
        outputs.append(y)
    assert all(np.array_equal(y, outputs[0]) for y in outputs[1:])


@pytest.mark.parametrize("tiles, units, blocks", [
    (96, 16, 132), (96, 16, 264), (32, 56, 264), (4, 2, 3), (4, 2, 8), (1, 7, 7),
    (448, 32, 264), (3, 1, 2),
])
def test_stream_k_slots_count_the_blocks_the_kernel_finds_for_a_tile(tiles, units, blocks):
    """`streamk_slots` is the most blocks that the kernel's `owner` finds among one
    tile's units, so a block's part `b - owner(first unit)` has its slot."""
    work = tiles * units
    owners = [owner(u, work, blocks) for u in range(work)]
    assert owners == sorted(owners) and set(owners) == set(range(blocks))
    most = max(len(set(owners[t * units:(t + 1) * units])) for t in range(tiles))
    assert streamk_slots(tiles, units, blocks) == most


def test_stream_k_refuses_more_blocks_than_units():
    with pytest.raises(ValueError, match="at most one block a unit"):
        streamk_slots(2, 3, 7)
