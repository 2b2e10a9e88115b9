"""tune.control_search (level 3): safe moves only, with a stand-in runner on the CPU
(nvdisasm checks every proposal for real); on the GPU a short search of the attention
example stays bit-exact, and the fault injection the issue names, stalls lowered, is
caught by the gate or the runner."""

from __future__ import annotations

import hashlib
import random
from dataclasses import replace

import numpy as np
import pytest

from tilevm.bench.examples import load_example
from tilevm.tune import control_search
from tilevm.tune.runner import Candidate, Outcome, run_candidates
from tilevm.tune.sass_control import Cubin

SETTINGS = {"d": 64, "causal": False, "block_q": 64, "block_kv": 64, "num_warps": 4}


def attention(seed=1):
    module = load_example("attention")
    args, constants = module.example_inputs(np.random.default_rng(seed), **dict(SETTINGS))
    return module.attention.specialize(**constants), args


def test_moves_are_safe_and_touch_one_instruction():
    from tilevm.tune.sass_control import Control

    rng = random.Random(3)
    original = tuple(Control(stall=rng.randrange(16), yield_=rng.randrange(2),
                             write_barrier=rng.randrange(8), read_barrier=rng.randrange(8),
                             wait_mask=rng.randrange(64), reuse=rng.randrange(16))
                     for _ in range(50))
    state = original
    for _ in range(2000):
        moved = control_search.neighbour_controls(original, state, rng)
        assert sum(a != b for a, b in zip(moved, state)) == 1
        assert all(m.is_safe_from(o) for m, o in zip(moved, original))
        state = moved
    assert state != original


class HashRunner:
    """The runner's interface: every candidate bit-exact, its time from its cubin's
    hash; runs logged."""

    runs: list = []

    def __init__(self, inputs, *, repeat, timeout_s):
        HashRunner.runs = []

    def run(self, candidate):
        HashRunner.runs.append(candidate)
        data = candidate.cubin or b""
        return Outcome(outputs=(("same",),),
                       seconds=1e-3 + int(hashlib.sha256(data).hexdigest(), 16) % 997 / 1e6)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def test_the_search_keeps_its_books_and_every_run_cubin_decodes(monkeypatch):
    from tilevm.tune.sass_control import disassemble

    monkeypatch.setattr(control_search, "Runner", HashRunner)
    monkeypatch.setattr(control_search, "current_arch", lambda: "sm_90a")
    module = load_example("vector_add")
    program = module.vector_add.specialize()
    args = module.example_inputs(np.random.default_rng(0), n=100)[0]
    result = control_search.search_controls(program, [args], steps=8, seed=5)
    runs = HashRunner.runs
    assert runs[0].cubin is None  # the compiled kernel: the gate's reference
    cubins = [Cubin(c.cubin) for c in runs[1:]]
    lines = disassemble(cubins[0])
    assert all(disassemble(c) == lines for c in cubins)
    assert result.ran + 1 == len(cubins)  # the unedited cubin, then each new one once
    assert result.ran + result.repeated == len(result.annealing.trace) == 8
    assert result.rejected == result.ran - (len(cubins) - 1)  # not decoded: never run
    original = cubins[0].kernel("vector_add").controls()
    best = Cubin(result.cubin).kernel("vector_add").controls()
    assert all(b.is_safe_from(o) for b, o in zip(best, original))


@pytest.mark.gpu
def test_gpu_safe_edits_stay_bit_exact_and_lowered_stalls_are_caught():
    program, args = attention()
    data = [args, attention(seed=2)[1]]
    result = control_search.search_controls(program, data, steps=20, seed=1, repeat=5)
    assert result.best_s > 0
    cubin = control_search.machine_code(program)
    controls = cubin.kernel("attention").controls()
    # every stall down to the least that decodes (0 without the yield bit, 1 with it)
    lowered = cubin.with_controls("attention", {
        i: replace(c, stall=c.yield_) for i, c in enumerate(controls) if c.stall > c.yield_})
    reference, safe, faulty = run_candidates(
        [Candidate(program), Candidate(program, cubin=result.cubin),
         Candidate(program, cubin=lowered.data)], data, repeat=0)
    assert reference.valid and safe.valid and safe.outputs == reference.outputs
    assert not faulty.valid or faulty.outputs != reference.outputs
