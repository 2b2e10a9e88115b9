"""kernels.qmm_search (level 1: the schedule space annealed), with a stand-in for the
GPU runner: each candidate's time is a function of its program, and one kernel family
fails to run. Checks the bookkeeping, the inputs each candidate gets, the winner."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from tilevm.ir.printer import format_program
from tilevm.kernels import qmm_search
from tilevm.kernels.schedule import candidates, schedule_space
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
