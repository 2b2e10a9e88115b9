"""The searches past the grid for the quantized matmul: level 1, its schedule space
(`schedule.schedule_space`) annealed on the GPU (`tune.anneal`) from a given schedule
(the grid's best, or the cost model's); and `tune_problem`, levels 1 and 2 in turn with
the winner's final checks.

    result = search_schedule("int4", M=16, N=4096, K=4096, start=best, steps=60,
                             seed=1, hopper=True)
    result.best, result.best_s, result.start_s

Each proposal is compiled and timed in the tuner's runner (`tune.runner`: a child
process behind a watchdog) on `qmm_problem.QmmProblem`'s inputs: the timed problem and
the gate set. A proposal that fails to compile, load or run is rejected. Schedules
differ in their arithmetic (the order of the sums), so no bit-exact gate applies
between them: each is one of the library's kernels, whose correctness its tests check
against float64.

    tuned = tune_problem("int4", M=16, N=4096, K=4096, start=best, hopper=True)
    tuned.schedule, tuned.ptx, tuned.times_s, tuned.samples, tuned.sanitizers

`tune_problem` runs, within `budget_s` for the searches:

1. the start timed `SPREAD_RUNS` times: its spread (max / min - 1); a new best must beat
   the incumbent by more than twice it (`min_gain`), here and in the head-to-heads;
2. level 1 from the start (`LEVEL1_SHARE` of the budget); its winner and the start
   timed head to head (`ROUNDS` alternating rounds): the winner kept only if faster by
   more than `min_gain`;
3. level 2 (`tune.order_search`, `LEVEL2_SHARE`) on the kept schedule's PTX, behind the
   bit-exact gate on `QmmProblem`'s gate set; the start, the kept schedule and it with
   level 2's order timed head to head: each kept only if faster than the one before it
   by more than `min_gain` (so the result is never slower than the start there);
4. the final checks (`tune.verify`): the kept kernel on 10^7 output values of fresh
   inputs (`QmmProblem.sample_inputs`) against float64 within the bound of
   `QmmProblem.check_outputs`, and bitwise against the compiled order where the order
   moved; then compute-sanitizer's memcheck and racecheck on the gate set. A level whose
   result fails a check is undone (the order first, then the schedule).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from tilevm.dtypes import DataType
from tilevm.ir.stmt import Program
from tilevm.kernels.qmm_problem import QmmProblem
from tilevm.kernels.schedule import Schedule, schedule_point, schedule_space
from tilevm.tune.anneal import AnnealResult, anneal_measured
from tilevm.tune.order_search import OrderSearch, search_order
from tilevm.tune.runner import Candidate, Runner
from tilevm.tune.verify import SAMPLES, SampleCheck, Sanitized, check_samples, sanitize

__all__ = ["ScheduleSearch", "search_schedule", "Tuned", "tune_problem"]

SPREAD_RUNS = 3
ROUNDS = 5
LEVEL1_SHARE = 0.45  # of the budget: level 1's search
LEVEL2_SHARE = 0.35  # level 2's (the rest is the timing around them)


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


@dataclass(frozen=True)
class Tuned:
    """What `tune_problem` kept: the schedule (the start where level 1 found nothing
    better), the order of its PTX (None: the compiled order), the head-to-head medians
    in seconds ("start", "level 1" and "level 2", each the kept result up to that
    level), the start's spread, each level's search, the final checks (None where they
    were not run) and the wall time."""

    start: Schedule
    schedule: Schedule
    ptx: str | None
    times_s: dict[str, float]
    spread: float
    level1: ScheduleSearch
    level2: OrderSearch
    samples: SampleCheck | None
    sanitizers: tuple[Sanitized, ...]
    undone: tuple[str, ...]
    wall_s: float

    @property
    def speedup(self) -> float:
        return self.times_s["start"] / self.times_s["level 2"]


def tune_problem(wdtype: DataType | str, M: int, N: int, K: int, *, start: Schedule,
                 hopper: bool, seed: int = 1, budget_s: float = 600.0,
                 level1_steps: int = 60, level2_steps: int = 150, group_size: int = 128,
                 repeat: int = 20, samples: int = SAMPLES, verify: bool = True,
                 timeout_s: float = 120.0) -> Tuned:
    """Levels 1 and 2 from `start`, and the final checks (module docstring)."""
    began = time.monotonic()
    problem = QmmProblem(wdtype, M, N, K, group_size=group_size, seed=seed)
    start_program = problem.program(start)
    with Runner([], repeat=repeat, timeout_s=timeout_s) as runner:
        runs = [_timed(runner, problem, start, start_program) for _ in range(SPREAD_RUNS)]
    spread = max(runs) / min(runs) - 1
    min_gain = 2 * spread

    level1 = search_schedule(wdtype, M, N, K, start=start, steps=level1_steps, seed=seed,
                             hopper=hopper, group_size=group_size, repeat=repeat,
                             timeout_s=timeout_s, budget_s=LEVEL1_SHARE * budget_s,
                             min_gain=min_gain)
    schedule = start
    if level1.best != start:
        found = _head_to_head(problem, [(start, start_program, None),
                                        (level1.best, problem.program(level1.best), None)],
                              repeat, timeout_s)
        if found[1] < found[0] * (1 - min_gain):
            schedule = level1.best
    program = problem.program(schedule)
    level2 = search_order(program, problem.inputs(schedule), steps=level2_steps, seed=seed,
                          repeat=repeat, timeout_s=timeout_s,
                          budget_s=LEVEL2_SHARE * budget_s, min_gain=min_gain)
    final = _head_to_head(problem, [(start, start_program, None), (schedule, program, None),
                                    (schedule, program, level2.ptx)], repeat, timeout_s)
    kept = 0  # the start, the schedule in its compiled order, or with level 2's order
    for k in (1, 2):
        if final[k] < final[kept] * (1 - min_gain):
            kept = k
    if kept == 0:
        schedule = start
    ptx = level2.ptx if kept == 2 else None
    times = {"start": final[0], "level 1": final[1] if kept else final[0],
             "level 2": final[kept]}

    checks, sanitized, undone = None, (), ()
    if verify:
        schedule, ptx, checks, sanitized, undone = _verified(problem, start, schedule, ptx,
                                                             samples, timeout_s)
        if "level 2" in undone:
            times["level 2"] = times["level 1"]
        if "level 1" in undone:
            times["level 1"] = times["level 2"] = times["start"]
    return Tuned(start, schedule, ptx, times, spread, level1, level2, checks, sanitized,
                 undone, time.monotonic() - began)


def _timed(runner: Runner, problem: QmmProblem, s: Schedule, program: Program,
           ptx: str | None = None) -> float:
    name = problem.inputs_name(s)
    if name not in runner.inputs:
        runner.add_inputs(name, problem.inputs(s)[:1])
    outcome = runner.run(Candidate(program, ptx, name))
    if not outcome.valid or outcome.seconds is None:
        raise RuntimeError(f"{s} failed to run: {outcome.error}")
    return outcome.seconds


def _head_to_head(problem: QmmProblem,
                  kernels: Sequence[tuple[Schedule, Program, str | None]], repeat: int,
                  timeout_s: float) -> list[float]:
    """Each kernel's median time over `ROUNDS` rounds, one run of each per round (a
    drift of the clocks weighs on all alike)."""
    times: list[list[float]] = [[] for _ in kernels]
    with Runner([], repeat=repeat, timeout_s=timeout_s) as runner:
        for _ in range(ROUNDS):
            for k, (s, program, ptx) in enumerate(kernels):
                times[k].append(_timed(runner, problem, s, program, ptx))
    return [statistics.median(t) for t in times]


def _verified(problem: QmmProblem, start: Schedule, schedule: Schedule, ptx: str | None,
              samples: int, timeout_s: float
              ) -> tuple[Schedule, str | None, SampleCheck, tuple[Sanitized, ...],
                         tuple[str, ...]]:
    """The final checks of the kept kernel, undoing the levels whose result fails them
    (the order first, then the schedule); the start is the grid's and is not undone."""
    undone: list[str] = []
    while True:
        program = problem.program(schedule)
        winner = Candidate(program, ptx)
        checks = check_samples(
            winner, lambda i, s=schedule: problem.sample_inputs(s, i),
            reference=Candidate(program) if ptx is not None else None,
            compare=problem.check_outputs, samples=samples, timeout_s=timeout_s)
        sanitized = tuple(sanitize(winner, problem.inputs(schedule)[1:], tool)
                          for tool in ("memcheck", "racecheck")) if checks.passed else ()
        if checks.passed and all(s.clean for s in sanitized):
            return schedule, ptx, checks, sanitized, tuple(undone)
        if ptx is not None:
            ptx = None
            undone.append("level 2")
        elif schedule != start:
            schedule = start
            undone.append("level 1")
        else:
            return schedule, ptx, checks, sanitized, tuple(undone)
