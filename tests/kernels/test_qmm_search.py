"""kernels.qmm_search (level 1: the schedule space annealed), with a stand-in for the
GPU runner: each candidate's time is a function of its program, and one kernel family
fails to run. Checks the bookkeeping, the inputs each candidate gets, the winner."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from tilevm.ir.printer import format_program
from tilevm.kernels import qmm_search
from tilevm.kernels.qmm_search import schedule_space
from tilevm.kernels.tilings import candidates
from tilevm.tune.runner import Outcome


class FakeRunner:
    """The runner's interface: staged kernels "fail" (an invalid candidate); the
    others take 1 + a fraction of a millisecond by the hash of their program's text."""

    log: list = []

    def __init__(self, inputs, *, repeat, timeout_s):
        self.inputs = {"": inputs}
        FakeRunner.log = []

    def add_inputs(self, name, inputs):
        assert name not in self.inputs
        self.inputs[name] = inputs

    def run(self, candidate):
        text = format_program(candidate.program)
        args = self.inputs[candidate.inputs]
        FakeRunner.log.append((candidate.program, candidate.inputs, args))
        if "qmm_staged" in candidate.program.name:
            return Outcome(error="CUDA_ERROR_LAUNCH_FAILED (a stand-in)")
        return Outcome(outputs=(("-",),), seconds=1e-3 + zlib.crc32(text.encode()) % 997 / 1e6)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


@pytest.mark.parametrize("hopper, M", [(False, 16), (True, 128)])
def test_the_schedule_search_keeps_its_books(monkeypatch, hopper, M):
    monkeypatch.setattr(qmm_search, "Runner", FakeRunner)
    N, K = 256, 1024
    start = next(s for s in candidates(M, N, K, 128, hopper=hopper, bits=4) if not s.dequant)
    result = qmm_search.search_schedule("int4", M, N, K, start=start, steps=30, seed=2,
                                        hopper=hopper)
    runs = FakeRunner.log
    assert result.ran + 1 == len(runs)  # the start, then each new schedule once
    assert result.ran + result.repeated == len(result.annealing.trace) == 30
    assert result.rejected == sum("qmm_staged" in p.name for p, _, _ in runs)
    times = [1e-3 + zlib.crc32(format_program(p).encode()) % 997 / 1e6
             for p, _, _ in runs if "qmm_staged" not in p.name]
    assert result.best_s == min(times) and result.start_s == times[0]
    space = schedule_space(K, 128, hopper=hopper, bits=4)
    assert result.best.fits(K, 128) and (hopper or not result.best.wgmma)
    assert space.candidate(result.annealing.best) == result.best
    for program, name, args in runs:  # the arguments match the kernel's parameters
        assert len(args[0]) == len(program.params)
        split = [a for a in args[0] if isinstance(a, np.ndarray) and a.dtype == np.float32]
        assert bool(split) == name.startswith("split")


def test_a_dequant_start_is_refused(monkeypatch):
    monkeypatch.setattr(qmm_search, "Runner", FakeRunner)
    start = next(s for s in candidates(4096, 4096, 4096, 128, hopper=True, bits=4)
                 if s.dequant)
    with pytest.raises(ValueError, match="is not a point of this schedule space"):
        qmm_search.search_schedule("int4", 4096, 4096, 4096, start=start, steps=1, seed=0,
                                   hopper=True)


class TimedFakeRunner(FakeRunner):
    """FakeRunner, with a PTX variant twice as fast as its compiled kernel."""

    def run(self, candidate):
        outcome = super().run(candidate)
        if candidate.ptx is not None and outcome.valid:
            return Outcome(outputs=outcome.outputs, seconds=outcome.seconds / 2)
        return outcome


@pytest.mark.parametrize("samples_fail_with_the_order", [False, True])
def test_tune_problem_keeps_what_beats_the_start_and_undoes_what_fails_a_check(
        monkeypatch, samples_fail_with_the_order):
    from tilevm.tune.order_search import OrderSearch
    from tilevm.tune.verify import SampleCheck, Sanitized

    monkeypatch.setattr(qmm_search, "Runner", TimedFakeRunner)
    orders, checked, sanitized = [], [], []

    def search_order(program, inputs, **kwargs):
        orders.append((program, kwargs["min_gain"]))
        return OrderSearch("FAKE PTX", 1.0, 2.0, None, 1, 0, 0)

    def check_samples(winner, make_inputs, *, reference, compare, samples, timeout_s):
        checked.append((winner.ptx, reference))
        args = make_inputs(0)
        assert len(args) == len(winner.program.params)
        fails = samples_fail_with_the_order and winner.ptx is not None
        return SampleCheck(samples, 1, ("differs",) if fails else ())

    def sanitize(winner, inputs, tool):
        sanitized.append(tool)
        return Sanitized(tool, True, None, 0, "")

    monkeypatch.setattr(qmm_search, "search_order", search_order)
    monkeypatch.setattr(qmm_search, "check_samples", check_samples)
    monkeypatch.setattr(qmm_search, "sanitize", sanitize)
    M, N, K = 16, 256, 1024
    start = candidates(M, N, K, 128, hopper=False, bits=4)[0]
    heard = []
    tuned = qmm_search.tune_problem("int4", M, N, K, start=start, hopper=False,
                                    level1_steps=20, samples=1000, progress=heard.append)
    assert tuned.spread == 0 and orders[0][1] == 0  # the fake times do not vary
    steps = [line.rsplit(" (", 1)[0] for line in heard]  # (without the seconds)
    checks = ["the final checks of level 2's kernel: 1,000 values",
              "compute-sanitizer memcheck", "compute-sanitizer racecheck"]
    if samples_fail_with_the_order:  # level 2's kernel fails: level 1's is checked
        checks[1:] = ["the final checks of level 1's kernel: 1,000 values", *checks[1:]]
    assert steps == ["timing the start's spread", "level 1: the schedule's knobs",
                     "level 2: the PTX order", *checks, "the final head-to-head"]
    assert all(line.endswith(" s)") for line in heard)
    if tuned.level1.best_s < tuned.level1.start_s:
        assert tuned.schedule == tuned.level1.best == tuned.after["level 1"].schedule
    times = tuned.times_s
    assert list(times) == ["start", "level 1", "level 2"] and tuned.level3 is None
    assert times["level 2"] <= times["level 1"] <= times["start"]
    if samples_fail_with_the_order:
        assert tuned.kernel.ptx is None and tuned.undone == ("level 2",)
        assert tuned.after["level 2"] == tuned.after["level 1"] == tuned.kernel
        assert checked == [("FAKE PTX", checked[0][1]), (None, None)]
        assert times["level 2"] == times["level 1"]
    else:
        assert tuned.kernel.ptx == "FAKE PTX" and tuned.undone == ()
        assert times["level 2"] == pytest.approx(times["level 1"] / 2)
        assert checked[0][1] is not None and checked[0][1].ptx is None  # vs compiled order
    assert tuned.speedup == times["start"] / times["level 2"]
    assert sanitized == ["memcheck", "racecheck"]
    assert tuned.samples is not None and tuned.samples.passed


@pytest.mark.gpu
def test_gpu_tune_problem_on_a_small_problem():
    """The levels (the third on Hopper) and the final checks on the device, briefly: the
    checks pass on the kept kernel, and it is never slower head to head than the
    start."""
    from tilevm.backend.launch import current_arch
    from tilevm.kernels.tilings import default_schedule

    hopper = current_arch() == "sm_90a"
    M, N, K = 16, 512, 1024
    start = default_schedule(M, N, K, 128, hopper=hopper, bits=4)
    tuned = qmm_search.tune_problem("int4", M, N, K, start=start, hopper=hopper,
                                    level1_steps=6, level2_steps=6,
                                    level3_steps=6 if hopper else 0, samples=200_000,
                                    budget_s=90)
    assert tuned.samples is not None and tuned.samples.passed
    assert tuned.samples.samples >= 200_000
    assert [s.tool for s in tuned.sanitizers] == ["memcheck", "racecheck"]
    assert all(s.clean for s in tuned.sanitizers), [s.report for s in tuned.sanitizers]
    assert tuned.undone == ()
    kept = [level for level, k in tuned.after.items() if k == tuned.kernel][-1]
    assert tuned.times_s[kept] <= tuned.times_s["start"]


def test_inputs_of_another_problem_are_refused():
    from tilevm.kernels.qmm_problem import QmmProblem

    other = QmmProblem("int4", 16, 256, 512)
    start = candidates(16, 256, 1024, 128, hopper=False, bits=4)[0]
    with pytest.raises(ValueError, match="the inputs given are of another problem: int4 "
                                         "M=16 N=256 K=512 g128, not int4 M=16 N=256 K=1024"):
        qmm_search.search_schedule("int4", 16, 256, 1024, start=start, steps=1, seed=0,
                                   hopper=False, problem=other)
