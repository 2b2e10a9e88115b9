"""kernels.qmm_problem: a quantized-matmul schedule's program and inputs for the tuner's
runner. The inputs are checked against the interpreter (the gate set: every weight code,
special activations) and, on the GPU, the compiled kernel's outputs against a PTX
reordering's (tune.order_search's gate)."""

from __future__ import annotations

import numpy as np
import pytest

from tilevm.kernels import tilings as sch
from tilevm.kernels.qmm_problem import SPECIAL_F16, qmm_problem
from tilevm.kernels.schedule import Schedule
from tilevm.kernels.weight_format import FRAGMENTS, unpack_weights
from tilevm.vm import interpreter


@pytest.mark.parametrize("wdtype", ["int4", "int3", "f6e3m2"])
def test_the_gate_set_holds_every_code_and_the_special_values(wdtype):
    s = sch.default_schedule(16, 4096, 4096, 128, hopper=False, bits=4)
    program, (timed, gate) = qmm_problem(s, wdtype, 16, 4096, 4096)
    assert timed[-3:] == [16, 4096, 4096] and timed[0].shape == (16, 4096)
    x, packed = gate[0], gate[1]
    M, N, K = gate[-3:]
    assert M % s.bm and N % 32 and K % (s.split_k * 128) == 0
    codes = unpack_weights(packed, wdtype, FRAGMENTS)
    bits = 3 if wdtype == "int3" else 6 if wdtype == "f6e3m2" else 4
    for column in range(N):
        assert len(np.unique(codes[:, column])) == 1 << bits
    for value in SPECIAL_F16:
        assert np.any(x.view(np.uint16) == np.float16(value).view(np.uint16))


def test_the_gate_set_runs_in_the_interpreter_and_writes_every_output():
    s = sch.default_schedule(1, 256, 256, 128, hopper=False, bits=4)
    program, (_, gate) = qmm_problem(s, "int4", 1, 256, 256)
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in gate]
    interpreter.run(program, args)
    y = args[4]
    assert y.shape == (gate[-3], gate[-2])
    # rows with a NaN activation are NaN; the others are finite or +-Inf, never unwritten
    assert not np.isnan(y[np.isfinite(gate[0]).all(axis=1)]).any()


def test_dequant_schedules_are_two_launches():
    s = Schedule(bm=256, bk=64, num_warps=8, stages=4, lead=2, wgmma=True, dequant=True)
    with pytest.raises(ValueError, match="two kernels"):
        qmm_problem(s, "int4", 4096, 4096, 4096)


@pytest.mark.parametrize("i", [0, 3])  # a timed-shape set, and a small ragged one
def test_sample_outputs_of_the_interpreter_pass_the_bound_and_a_wrong_one_fails(i):
    """The final check's reference (float64 within an order-independent bound) against
    the interpreter's exact run; one output off by 1 (about what dropping a quarter of
    its products does here) must fail it."""
    from tilevm.kernels.qmm_problem import QmmProblem

    s = sch.default_schedule(16, 256, 512, 128, hopper=False, bits=4)
    problem = QmmProblem("int3", 16, 256, 512)
    args = problem.sample_inputs(s, i)
    assert np.isfinite(args[0]).all()
    run = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    interpreter.run(problem.program(s), run)
    y = run[4]
    count, failure = problem.check_outputs(args, (y,))
    assert failure is None and count == y.size == args[-3] * args[-2]
    again = problem.sample_inputs(s, i)  # deterministic per index
    assert all(np.array_equal(a, b) for a, b in zip(args[:2], again[:2]))
    wrong = y.copy()
    wrong[1, 2] += np.float16(1.0)
    problem.sample_inputs(s, i)  # (the check consumes the record of its weights)
    count, failure = problem.check_outputs(again if i % 4 == 3 else args, (wrong,))
    assert failure is not None and "y[1, 2]" in failure


def test_a_large_set_is_checked_on_a_subset_of_its_columns(monkeypatch):
    from tilevm.kernels import qmm_problem as qp

    monkeypatch.setattr(qp, "CHECKED_PER_SET", 64)  # 16 rows: 4 columns checked
    s = sch.default_schedule(16, 256, 512, 128, hopper=False, bits=4)
    problem = qp.QmmProblem("int4", 16, 256, 512)
    args = problem.sample_inputs(s, 0)
    run = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    interpreter.run(problem.program(s), run)
    count, failure = problem.check_outputs(args, (run[4],))
    assert failure is None and count == 64
    count, failure = problem.check_outputs(args, (run[4] + np.float16(1.0),))
    assert count == 64 and failure is not None and "64 of 64 outputs" in failure
