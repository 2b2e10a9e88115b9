"""tune.anneal (simulated annealing on measured times) and tune.order_search's moves."""

from __future__ import annotations

import math
import random
import zlib

import pytest
from kernel_harness import ROOT, compile_once
from ptx_legality import check_order

from tilevm.bench.examples import load_example
from tilevm.tune.anneal import anneal
from tilevm.tune.order_search import neighbour_orders, search_order
from tilevm.tune.ptx_order import PtxOrder
from tilevm.tune.runner import Outcome


# a toy landscape: integers 0..99, time 1 + |x - 70| / 100, with a local minimum at 20
def toy_time(x):
    return 1 + abs(x - 70) / 100 - (0.2 if x == 20 else 0.0) if 0 <= x < 100 else None


def toy_neighbour(x, rng):
    return x + rng.choice((-3, -2, -1, 1, 2, 3))


def test_the_same_seed_gives_the_same_trajectory_and_winner():
    a = anneal(10, toy_neighbour, toy_time, steps=300, seed=5)
    b = anneal(10, toy_neighbour, toy_time, steps=300, seed=5)
    c = anneal(10, toy_neighbour, toy_time, steps=300, seed=6)
    assert a == b and a.trace != c.trace


def test_annealing_finds_the_minimum_and_rejects_invalid_proposals():
    results = [anneal(10, toy_neighbour, toy_time, steps=400, seed=seed) for seed in range(6)]
    # every search ends at a minimum, most of them past the local one at 20
    assert {r.best for r in results} <= {20, 70}
    assert sum(r.best == 70 and r.best_s == 1.0 for r in results) >= 3
    for r in results:
        assert r.best_s == min(s.seconds for s in r.trace if s.seconds is not None)
    edge = anneal(0, toy_neighbour, toy_time, steps=50, seed=1)
    assert any(s.seconds is None and not s.accepted for s in edge.trace)  # x < 0


def test_acceptance_follows_metropolis_on_relative_time():
    slower = [1.0, 1.05]  # every proposal 5% slower than the start
    result = anneal(0, lambda x, rng: x + 1, lambda x: slower[min(x, 1)] if x == 0 else 1.05,
                    steps=2000, seed=3, start_temperature=0.05 / math.log(2),
                    end_temperature=0.05 / math.log(2))
    # the first proposal from the start: accepted with probability 1/2 at T = 0.072
    accepted = [s.accepted for s in result.trace]
    assert accepted[0] in (True, False)
    # once on a 1.05 state, proposals of equal time are always accepted
    first = accepted.index(True)
    assert all(accepted[first:])


def test_min_gain_keeps_the_incumbent_against_small_gains():
    times = {0: 1.0, 1: 0.99, 2: 0.98}
    result = anneal(0, lambda x, rng: min(x + 1, 2), times.get, steps=2, seed=0,
                    min_gain=0.05)
    assert result.best == 0 and result.best_s == 1.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="steps must be >= 0"):
        anneal(0, toy_neighbour, toy_time, steps=-1, seed=0)
    with pytest.raises(ValueError, match="temperatures must satisfy"):
        anneal(0, toy_neighbour, toy_time, steps=1, seed=0, start_temperature=0.01,
               end_temperature=0.1)
    with pytest.raises(ValueError, match="starting candidate is invalid"):
        anneal(-5, toy_neighbour, toy_time, steps=1, seed=0)
    with pytest.raises(ValueError, match="repeat must be >= 1"):
        search_order(load_example("vector_add").vector_add.specialize(), [], steps=1,
                     seed=0, repeat=0)


def test_a_stop_ends_the_search_early():
    calls = []
    result = anneal(50, toy_neighbour, toy_time, steps=100, seed=1,
                    stop=lambda: calls.append(1) or len(calls) > 10)
    assert len(result.trace) == 10


def test_order_moves_stay_legal():
    program = load_example("attention").attention.specialize(d=64)
    order = PtxOrder.parse(compile_once(program, "sm_80").ptx)
    orders = tuple(tuple(range(len(r.instructions))) for r in order.runs)
    rng = random.Random(4)
    changed = 0
    for _ in range(300):
        new = neighbour_orders(order, orders, rng)
        changed += new != orders
        orders = new
    assert changed > 150  # (a memory move may land where it was)
    for run, run_order in zip(order.runs, orders, strict=True):
        assert check_order(run, list(run_order)) == []


class FakeRunner:
    """The runner's interface without a GPU: a candidate's time is a function of its
    text, and one text in seven fails the gate (other outputs)."""

    runs: list[str] = []

    def __init__(self, inputs, *, repeat, timeout_s):
        FakeRunner.runs = []

    @staticmethod
    def code(text):
        return zlib.crc32(text.encode())

    def run(self, candidate):
        text = candidate.ptx or "compiled"
        FakeRunner.runs.append(text)
        bad = candidate.ptx is not None and self.code(text) % 7 == 0
        return Outcome(outputs=(("bad" if bad else "good",),),
                       seconds=1.0 + self.code(text) % 1000 / 1e5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def test_order_search_counts_runs_repeats_and_rejections(monkeypatch):
    from tilevm.tune import order_search

    program = load_example("vector_add").vector_add.specialize()
    ptx = compile_once(program, "sm_80").ptx
    monkeypatch.setattr(order_search, "compiled_ptx", lambda p: ptx)
    monkeypatch.setattr(order_search, "Runner", FakeRunner)
    result = search_order(program, [[]], steps=60, seed=3)
    texts = FakeRunner.runs[1:]  # after the compiled kernel, each text run once
    assert len(texts) == len(set(texts)) == result.ran
    assert result.ran + result.repeated == len(result.annealing.trace) == 60
    assert result.rejected == sum(FakeRunner.code(t) % 7 == 0 for t in texts) > 0
    assert result.start_s == 1.0 + FakeRunner.code("compiled") % 1000 / 1e5
    assert result.best_s == min([result.start_s] + [1.0 + FakeRunner.code(t) % 1000 / 1e5
                                                    for t in texts if FakeRunner.code(t) % 7])
    assert result.ptx == PtxOrder.parse(ptx).text(result.annealing.best)


@pytest.mark.gpu
def test_gpu_order_search_keeps_the_kernel_bit_exact():
    import numpy as np

    from tilevm.tune.runner import Candidate, run_candidates

    module = load_example("vector_add")
    program = module.vector_add.specialize()
    rng = np.random.default_rng(0)
    inputs = [module.example_inputs(rng, n=n)[0] for n in (1000, 4097)]
    result = search_order(program, inputs, steps=12, seed=2, repeat=5, timeout_s=30)
    assert result.ran + result.repeated == len(result.annealing.trace) == 12
    assert result.best_s <= result.start_s
    original, best = run_candidates([Candidate(program), Candidate(program, result.ptx)],
                                    inputs, repeat=0)
    assert best.valid and best.outputs == original.outputs


@pytest.mark.gpu
def test_gpu_vmc_tune_writes_a_bit_exact_order(tmp_path, capsys):
    import numpy as np

    from tilevm.cli import main
    from tilevm.tune.runner import Candidate, run_candidates

    out = tmp_path / "best.ptx"
    source = str(ROOT / "examples" / "vector_add.py")
    assert main(["tune", source, "--set", "n=5000", "--steps", "6", "--seed", "1",
                 "-o", str(out)]) == 0
    assert "us compiled" in capsys.readouterr().err
    module = load_example("vector_add")
    program = module.vector_add.specialize()
    inputs = [module.example_inputs(np.random.default_rng(9), n=777)[0]]
    original, best = run_candidates([Candidate(program), Candidate(program, out.read_text())],
                                    inputs, repeat=0)
    assert best.valid and best.outputs == original.outputs


def test_measurements_within_the_spread_give_the_same_trajectory():
    """Two runs of one seed on times perturbed by +-0.2% (min_gain 2%) on a landscape
    whose neighbours differ by 3% (one multiple of min_gain, with room for the noise)
    or by 0.1% (equal): the same decisions, the same winner. Without min_gain the
    noise changes the decisions."""
    def landscape(x):
        if not 0 <= x < 100:
            return None
        return 1.03 ** (abs(x - 70) // 3) * (1 + 0.001 * (x % 3))

    def noisy(seed):
        rng = random.Random(seed)
        return lambda x: None if landscape(x) is None else \
            landscape(x) * (1 + rng.uniform(-0.002, 0.002))

    a = anneal(10, toy_neighbour, noisy(1), steps=300, seed=9, min_gain=0.02)
    b = anneal(10, toy_neighbour, noisy(2), steps=300, seed=9, min_gain=0.02)
    assert [s.accepted for s in a.trace] == [s.accepted for s in b.trace]
    assert a.best == b.best and landscape(a.best) < landscape(10)
    plain = anneal(10, toy_neighbour, noisy(1), steps=300, seed=9)  # (min_gain 0)
    other = anneal(10, toy_neighbour, noisy(2), steps=300, seed=9)
    assert [s.accepted for s in plain.trace] != [s.accepted for s in other.trace]
