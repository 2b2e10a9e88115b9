"""tune.runner: candidates in a child process behind a watchdog. On the GPU: outputs
and times of good candidates, a faulting variant and a hanging one marked invalid while
the others still run; without a GPU: every candidate invalid with the reason, no hang."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest

from tilevm.bench.examples import load_example
from tilevm.tune.runner import Candidate, run_candidates

vector_add = load_example("vector_add")


def inputs(count=2, n=1000):
    rng = np.random.default_rng(3)
    return [vector_add.example_inputs(rng, n=n)[0] for _ in range(count)]


def has_gpu() -> bool:
    from tilevm.backend.cuda import driver
    from tilevm.backend.cuda.errors import NoDriverError

    try:
        driver.device_name()
    except (NoDriverError, Exception):  # noqa: BLE001 (no driver, no device, no bindings)
        return False
    return True


def test_a_timeout_must_be_positive():
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        run_candidates([], [], timeout_s=0)


def test_without_a_gpu_every_candidate_is_invalid_with_its_reason():
    if has_gpu():
        pytest.skip("a GPU is present")
    program = vector_add.vector_add.specialize()
    outcomes = run_candidates([Candidate(program)] * 2, inputs(), timeout_s=120)
    assert [o.valid for o in outcomes] == [False, False]
    assert all(o.error and o.outputs is None for o in outcomes)


@pytest.mark.gpu
def test_gpu_good_faulting_and_hanging_candidates():
    from tilevm.tune.ptx_order import PtxOrder
    from tilevm.tune.variants import compiled_ptx

    program = vector_add.vector_add.specialize()
    ptx = compiled_ptx(program)
    reordered = PtxOrder.parse(ptx).permuted(random.Random(1))
    # a hang: the body's first instruction branches to itself forever
    body = ptx.index("{", ptx.index(".entry")) + 1
    hang = ptx[:body] + "\n$L__hang:\n\tbra.uni $L__hang;\n" + ptx[body:]
    # a fault: a store through a null address at the start
    fault = ptx[:body] + "\n\t.reg .b64 %rdnull;\n\tmov.u64 %rdnull, 0;\n" \
        "\tst.global.u32 [%rdnull], 1;\n" + ptx[body:]
    data = inputs()
    outcomes = run_candidates(
        [Candidate(program), Candidate(program, hang), Candidate(program, reordered),
         Candidate(program, fault), Candidate(program, "not PTX"), Candidate(program)],
        data, repeat=5, timeout_s=20)
    good, hung, moved, faulted, broken, again = outcomes
    assert good.valid and good.seconds is not None and good.seconds > 0
    expected = tuple(hashlib.sha256((np.asarray(args[0]) + np.asarray(args[1]))
                                    .astype(np.float32).tobytes()).hexdigest()
                     for args in data)
    assert tuple(out[0] for out in good.outputs) == expected
    assert "timeout" in hung.error
    assert moved.valid and moved.outputs == good.outputs
    assert not faulted.valid and "CUDA_ERROR" in faulted.error
    assert not broken.valid
    assert again.valid and again.outputs == good.outputs  # a new worker took over


@pytest.mark.gpu
def test_gpu_an_order_that_drops_a_raw_edge_fails_the_gate():
    """Fault injection on the device: the longest run of the attention example's PTX
    with one use placed before its definition (a permuter that lost that edge) gives
    other outputs than the compiled kernel on some of five random problems."""
    from tilevm.tune.ptx_order import PtxOrder
    from tilevm.tune.variants import compiled_ptx

    module = load_example("attention")
    rng = np.random.default_rng(5)
    settings = {"d": 64, "causal": False, "block_q": 64, "block_kv": 64, "num_warps": 4}
    problems = [module.example_inputs(rng, **dict(settings)) for _ in range(5)]
    program = module.attention.specialize(**problems[0][1])
    order = PtxOrder.parse(compiled_ptx(program))
    run = max(order.runs, key=lambda r: len(r.instructions))
    a, b = next((a, b) for a, b in sorted(run.edges)
                if run.instructions[a].defines & run.instructions[b].reads
                and not run.instructions[a].memory)
    broken = list(range(len(run.instructions)))
    broken.remove(b)
    broken.insert(broken.index(a), b)
    orders = [broken if r is run else range(len(r.instructions)) for r in order.runs]
    original, faulty = run_candidates(
        [Candidate(program), Candidate(program, order.text(orders))],
        [args for args, _ in problems], repeat=0)
    assert original.valid
    assert not faulty.valid or faulty.outputs != original.outputs


def test_a_worker_holds_the_newest_input_sets_only():
    from tilevm.tune.runner import KEPT_INPUTS, _kept

    held: list[str] = []
    for name in ["a", "b", "c", "a"]:
        held = _kept(held, name)
    assert KEPT_INPUTS == 2 and held == ["c", "a"]
