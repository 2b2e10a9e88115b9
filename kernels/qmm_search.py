"""Level 1 of the search for the quantized matmul: its schedule space
(`schedule.schedule_space`) annealed on the GPU (`tune.anneal`), from a given schedule
(the grid's best, or the cost model's).

    result = search_schedule("int4", M=16, N=4096, K=4096, start=best, steps=60,
                             seed=1, hopper=True)
    result.best, result.best_s, result.start_s

Each proposal is compiled and timed in the tuner's runner (`tune.runner`: a child
process behind a watchdog) on `qmm_problem.QmmProblem`'s inputs: the timed problem and
the gate set. A proposal that fails to compile, load or run is rejected. Schedules
differ in their arithmetic (the order of the sums), so no bit-exact gate applies
between them: each is one of the library's kernels, whose correctness its tests check
against float64.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilevm.dtypes import DataType
from tilevm.kernels.qmm_problem import QmmProblem
from tilevm.kernels.schedule import Schedule, schedule_point, schedule_space
from tilevm.tune.anneal import AnnealResult, anneal_measured
from tilevm.tune.runner import Candidate, Runner

__all__ = ["ScheduleSearch", "search_schedule"]


@dataclass(frozen=True)
class ScheduleSearch:
    """The best schedule found and its time against the start's, the annealing, and
    how many proposals were run, repeated (a schedule measured before: skipped) or
    rejected."""

    best: Schedule
    best_s: float
    start_s: float
    annealing: AnnealResult[tuple[object, ...]]
    ran: int
    repeated: int
    rejected: int


def search_schedule(wdtype: DataType | str, M: int, N: int, K: int, *, start: Schedule,
                    steps: int, seed: int, hopper: bool, group_size: int = 128,
                    repeat: int = 20, timeout_s: float = 120.0, budget_s: float = 600.0,
                    min_gain: float = 0.0) -> ScheduleSearch:
    """Anneal the schedule of this problem from `start` for at most `steps` proposals
    and `budget_s` seconds (module docstring)."""
    if repeat < 1:
        raise ValueError(f"the search times its candidates: repeat must be >= 1, got {repeat}")
    problem = QmmProblem(wdtype, M, N, K, group_size=group_size, seed=seed)
    space = schedule_space(K, group_size, hopper=hopper, bits=problem.wdtype.bits)
    first = schedule_point(space, start)
    with Runner([], repeat=repeat, timeout_s=timeout_s) as runner:
        def run(point: tuple[object, ...]) -> float | None:
            s = space.candidate(point)
            assert s is not None  # (the space's moves land on candidates only)
            name = problem.inputs_name(s)
            if name not in runner.inputs:
                runner.add_inputs(name, problem.inputs(s))
            outcome = runner.run(Candidate(problem.program(s), inputs=name))
            return outcome.seconds if outcome.valid else None

        found = anneal_measured(first, space.neighbour, run, steps=steps, seed=seed,
                                budget_s=budget_s, min_gain=min_gain)
    best = space.candidate(found.annealing.best)
    assert best is not None
    return ScheduleSearch(best, found.annealing.best_s, found.start_s, found.annealing,
                          found.ran, found.repeated, found.rejected)
