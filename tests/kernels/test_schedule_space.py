"""The quantized matmul's schedule space as knobs (kernels.qmm_search.schedule_space) and
tune.space's moves over it."""

from __future__ import annotations

import random

import pytest

from tilevm.kernels.qmm_search import schedule_point, schedule_space
from tilevm.kernels.schedule import Schedule
from tilevm.kernels.tilings import candidates
from tilevm.tune.space import Knob, Space

PROBLEMS = [(1, 12288, 4096), (16, 4096, 14336), (64, 28672, 4096), (256, 57344, 8192),
            (4096, 8192, 8192)]


@pytest.mark.parametrize("M, N, K", PROBLEMS)
@pytest.mark.parametrize("hopper", [False, True])
def test_every_grid_candidate_is_a_point_and_moves_stay_in_the_space(M, N, K, hopper):
    space = schedule_space(K, 128, hopper=hopper, bits=4)
    for s in candidates(M, N, K, 128, hopper=hopper, bits=4):
        if s.dequant:  # two launches: not in the space
            continue
        point = schedule_point(space, s)
        assert space.candidate(point) == s
    rng = random.Random(M)
    point = schedule_point(space, next(s for s in candidates(M, N, K, 128, hopper=hopper,
                                                             bits=4) if not s.dequant))
    seen = {point}
    for _ in range(200):
        new = space.neighbour(point, rng)
        s = space.candidate(new)
        assert s is not None and s.fits(K, 128) and (hopper or not s.wgmma)
        assert sum(a != b for a, b in zip(point, new)) <= 1  # one knob at a time
        point = new
        seen.add(point)
    assert len(seen) > 10  # the walk goes somewhere


def test_the_space_refuses_what_the_kernels_refuse():
    space = schedule_space(4096, 128, hopper=False, bits=3)
    values = {k.name: k.values[0] for k in space.knobs}
    assert space.make({**values, "bm": 8, "swap_ab": True, "bk": 64, "num_warps": 2}) \
        == Schedule(bm=8, bk=64, num_warps=2, x_shared=False, swap_ab=True)
    wgmma = {**values, "bm": 128, "bk": 64, "num_warps": 4, "wgmma": True, "stages": 4,
             "lead": 2, "x_shared": True}
    assert space.make(wgmma) is None  # not on this GPU
    hopper = schedule_space(4096, 128, hopper=True, bits=3)
    assert hopper.make(wgmma) is not None
    assert hopper.make({**wgmma, "half_atoms": True}) is None  # an odd width
    assert hopper.make({**wgmma, "split_k": 8}) is not None
    short = schedule_space(512, 128, hopper=True, bits=3)  # chunks of 256 rows: 2 at most
    assert short.make({**wgmma, "split_k": 2}) is not None
    assert short.make({**wgmma, "split_k": 4}) is None
    assert space.make({**values, "staged": True, "wgmma": True}) is None


def test_knobs_and_starts_are_checked():
    with pytest.raises(ValueError, match="has no values"):
        Knob("bm", ())
    with pytest.raises(ValueError, match="repeats a value"):
        Knob("bm", (8, 8))
    space = Space((Knob("a", (1, 2, 3)), Knob("b", (0, 1))), lambda v: v["a"] + v["b"])
    with pytest.raises(ValueError, match="names every knob once"):
        space.start({"a": 1})
    with pytest.raises(ValueError, match="is not a value of knob 'a'"):
        space.start({"a": 7, "b": 0})
    assert space.start({"b": 1, "a": 2}) == (2, 1)
    assert len(space.points()) == 6


def test_a_move_never_lands_on_a_refused_point():
    # only points with a + b even are candidates: from (1, 1) every one-step move is
    # refused, so the point stays; from (2, 0), the moves to (1, 0) and (3, 0) are refused
    space = Space((Knob("a", (1, 2, 3)), Knob("b", (0, 1))),
                  lambda v: v if (v["a"] + v["b"]) % 2 == 0 else None)
    rng = random.Random(0)
    assert all(space.neighbour((1, 1), rng) == (1, 1) for _ in range(20))
    assert {space.neighbour((2, 0), rng) for _ in range(50)} <= {(2, 0)}
    assert sorted(space.points()) == [(1, 1), (2, 0), (3, 1)]
