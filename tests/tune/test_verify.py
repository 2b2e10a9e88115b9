"""tune.verify: a winner's final checks. Without a GPU: the arguments refused, the
sanitizer looked for where the docstring says. On the GPU: a reordering passes 10^5
sampled values against the compiled kernel and a numeric check; an order without one
RAW edge fails; compute-sanitizer finds an out-of-bounds store (memcheck) and a shared
race (racecheck: a `bar.sync` removed) that run without a fault, and passes the
compiled kernels."""

from __future__ import annotations

import os
import random
import re
import stat

import numpy as np
import pytest

from tilevm.bench.examples import load_example
from tilevm.tune import verify
from tilevm.tune.runner import Candidate
from tilevm.tune.verify import check_samples, find_sanitizer, sanitize

vector_add = load_example("vector_add")


def test_check_samples_needs_something_to_compare_with():
    program = vector_add.vector_add.specialize()
    with pytest.raises(ValueError, match="reference candidate, a compare"):
        check_samples(Candidate(program), lambda i: [])
    with pytest.raises(ValueError, match="samples and batch"):
        check_samples(Candidate(program), lambda i: [], reference=Candidate(program),
                      samples=0)


class ArrayRunner:
    """The runner's interface without a GPU: each candidate's output is its input sum,
    plus one where its PTX says "wrong"; every run is logged."""

    runs: list = []

    def __init__(self, inputs, *, repeat, timeout_s):
        self.inputs = {"": inputs}

    def add_inputs(self, name, inputs):
        self.inputs[name] = inputs

    def discard_inputs(self, name):
        del self.inputs[name]

    def run(self, candidate, *, keep_arrays=False):
        from tilevm.tune.runner import Outcome

        ArrayRunner.runs.append((candidate.ptx, len(self.inputs[candidate.inputs])))
        outs = [(np.asarray(a[0]) + np.asarray(a[1]) + (candidate.ptx == "wrong"))
                .astype(np.float32) for a in self.inputs[candidate.inputs]]
        return Outcome(outputs=tuple((o.tobytes().hex()[:16],) for o in outs), seconds=None,
                       arrays=tuple((o,) for o in outs) if keep_arrays else None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


@pytest.mark.parametrize("with_compare", [False, True])
def test_check_samples_runs_just_enough_sets_and_reports_failures(monkeypatch, with_compare):
    monkeypatch.setattr(verify, "Runner", ArrayRunner)
    ArrayRunner.runs = []
    program = vector_add.vector_add.specialize()
    compare = sum_check if with_compare else None
    report = check_samples(Candidate(program, "right"), sum_inputs,
                           reference=Candidate(program), compare=compare,
                           samples=100_000, batch=4)
    assert report.passed and report.input_sets == 25  # ceil(100000 / 4099)
    assert report.samples == 25 * 4099
    winner_runs = [sets for ptx, sets in ArrayRunner.runs if ptx == "right"]
    assert winner_runs == [1] + [4] * 6  # one set first, then batches
    report = check_samples(Candidate(program, "wrong"), sum_inputs,
                           reference=Candidate(program), compare=compare, samples=100_000)
    assert not report.passed and len(report.failures) == verify.KEPT_FAILURES
    assert "differ bitwise from the reference" in report.failures[0]


def test_an_unknown_sanitizer_tool_is_refused():
    program = vector_add.vector_add.specialize()
    with pytest.raises(ValueError, match="unknown sanitizer tool 'memchek'"):
        sanitize(Candidate(program), [], "memchek")


def test_the_sanitizer_is_found_on_path_then_beside_ptxas(tmp_path, monkeypatch):
    from tilevm.backend import ptxas

    def executable(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return str(path)

    fake_ptxas = executable(tmp_path / "cuda" / "bin" / "ptxas")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(ptxas, "find_ptxas", lambda: fake_ptxas)
    monkeypatch.setattr(ptxas, "_wheel_candidates", lambda exe: [])
    with pytest.raises(verify.SanitizerNotFoundError,
                       match="compute-sanitizer was not found.*skip the sanitizer"):
        find_sanitizer()
    beside = executable(tmp_path / "cuda" / "compute-sanitizer" / "compute-sanitizer")
    assert find_sanitizer() == os.path.normpath(beside)
    on_path = executable(tmp_path / "path" / "compute-sanitizer")
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    assert find_sanitizer() == on_path


def sum_inputs(i, n=4099):
    rng = np.random.default_rng(i)
    return vector_add.example_inputs(rng, n=n)[0]


def sum_check(args, arrays):
    expected = (np.asarray(args[0]) + np.asarray(args[1])).astype(np.float32)
    out = arrays[0]
    return out.size, None if np.array_equal(out, expected) else "sum differs"


@pytest.mark.gpu
def test_gpu_samples_pass_for_a_reordering_and_fail_without_a_raw_edge():
    from tilevm.tune.ptx_order import PtxOrder
    from tilevm.tune.variants import compiled_ptx

    program = vector_add.vector_add.specialize()
    order = PtxOrder.parse(compiled_ptx(program))
    reordered = Candidate(program, order.permuted(random.Random(2)))
    report = check_samples(reordered, sum_inputs, reference=Candidate(program),
                           compare=sum_check, samples=100_000, batch=4)
    assert report.passed and report.samples >= 100_000
    assert report.input_sets == -(-100_000 // 4099)  # one set, then as many as needed
    run = max(order.runs, key=lambda r: len(r.instructions))
    a, b = next((a, b) for a, b in sorted(run.edges)
                if run.instructions[a].defines & run.instructions[b].reads)
    broken = list(range(len(run.instructions)))
    broken.remove(b)
    broken.insert(broken.index(a), b)
    orders = [broken if r is run else range(len(r.instructions)) for r in order.runs]
    faulty = Candidate(program, order.text(orders))
    report = check_samples(faulty, sum_inputs, reference=Candidate(program),
                           compare=sum_check, samples=20_000, batch=2)
    assert not report.passed and report.failures


@pytest.mark.gpu
def test_gpu_memcheck_finds_an_out_of_bounds_store_that_runs_without_a_fault():
    from tilevm.tune.runner import run_candidates
    from tilevm.tune.variants import compiled_ptx

    program = vector_add.vector_add.specialize()
    ptx = compiled_ptx(program)
    # each store 64 bytes further: the last threads write just past the output's 4000
    # bytes, inside the pages the driver maps (no fault without the sanitizer)
    store = re.search(r"st\.global(\.\w+)+\s+\[(%rd\d+)\]", ptx)
    assert store is not None
    oob = ptx[:store.start()] + f"add.s64 {store.group(2)}, {store.group(2)}, 64;\n\t" + \
        ptx[store.start():]
    inputs = [sum_inputs(0, n=1000)]
    (plain,) = run_candidates([Candidate(program, oob)], inputs, repeat=0)
    assert plain.valid  # the fault is silent without the sanitizer
    clean = sanitize(Candidate(program), inputs, "memcheck")
    assert clean.clean, clean.report
    found = sanitize(Candidate(program, oob), inputs, "memcheck")
    # memcheck stops the kernel at the first invalid access: the run fails, the report
    # names the access
    assert not found.clean and found.error is not None
    assert "Invalid __global__ write" in found.report


@pytest.mark.gpu
def test_gpu_racecheck_finds_the_races_of_removed_barriers():
    from tilevm.tune.variants import compiled_ptx

    module = load_example("attention")
    settings = {"d": 64, "causal": False, "block_q": 64, "block_kv": 64, "num_warps": 4}
    args, constants = module.example_inputs(np.random.default_rng(1), **dict(settings))
    program = module.attention.specialize(**constants)
    ptx = compiled_ptx(program)
    racy, removed = re.subn(r"\tbar\.sync\s+0;", "", ptx)
    assert removed >= 2
    clean = sanitize(Candidate(program), [args], "racecheck")
    assert clean.clean, clean.report
    found = sanitize(Candidate(program, racy), [args], "racecheck")
    assert not found.clean and "hazard" in found.report.lower()
