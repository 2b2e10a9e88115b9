"""The searches past the grid for the quantized matmul: level 1, its schedule space
(`schedule_space`) annealed on the GPU (`tune.anneal`) from a given schedule
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
    tuned.kernel, tuned.times_s, tuned.samples, tuned.sanitizers

`tune_problem` runs, within `budget_s` for the searches (`LEVEL_SHARES` of it each):

1. the start timed `SPREAD_RUNS` times: its spread (max / min - 1); a new best must beat
   the incumbent by more than twice it (`min_gain`), in the searches and in the
   head-to-heads (`ROUNDS` alternating rounds);
2. level 1 from the start; its winner kept if it beats the start head to head;
3. level 2 (`tune.order_search`) on the kept schedule's PTX, behind the bit-exact gate
   on `QmmProblem`'s gate set; its order kept if it beats the kept kernel head to head;
4. with `level3_steps`, level 3 (`tune.control_search`, sm_90) on the kept kernel's
   machine code, kept the same way;
5. the final checks (`tune.verify`): the kept kernel on 10^7 output values of fresh
   inputs (`QmmProblem.sample_inputs`) against float64 within the bound of
   `QmmProblem.check_outputs`, and bitwise against the compiled kernel where the order
   or the machine code moved; then compute-sanitizer's memcheck and racecheck on the
   gate set. A kernel that fails a check is undone, latest level first;
6. the kernels kept after each level timed head to head once more (`times_s`, what each
   level contributed); should the kept kernel not beat the start there, the start is
   kept: the result is never slower than the start in that final head-to-head.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace

from tilevm.dtypes import DataType
from tilevm.kernels.qmm_problem import QmmProblem
from tilevm.kernels.schedule import Schedule
from tilevm.kernels.tilings import candidates
from tilevm.kernels.weight_format import code_type
from tilevm.tune.anneal import AnnealResult, anneal_measured
from tilevm.tune.control_search import ControlSearch, search_controls
from tilevm.tune.order_search import OrderSearch, search_order
from tilevm.tune.runner import Candidate, Runner
from tilevm.tune.space import Knob, Space
from tilevm.tune.verify import SAMPLES, SampleCheck, Sanitized, check_samples, sanitize

__all__ = ["schedule_space", "schedule_point", "ScheduleSearch", "search_schedule",
           "TunedKernel", "Tuned", "tune_problem", "grid_schedule"]

SPREAD_RUNS = 3
ROUNDS = 5
# the budget's shares of the searches of levels 1, 2 (and 3); the rest is the timing
# around them. Indexed by whether level 3 runs.
LEVEL_SHARES = {False: (0.45, 0.35, 0.0), True: (0.3, 0.25, 0.25)}


# ---- the space as knobs (level 1 of `tilevm.tune`'s search) ------------------------------

KNOBS = (
    Knob("bm", (8, 16, 32, 64, 128, 256)), Knob("bk", (32, 64)),
    Knob("num_warps", (1, 2, 4, 8)), Knob("split_k", (1, 2, 3, 4, 6, 8, 16)),
    Knob("x_shared", (False, True)), Knob("prefetch", (1, 2, 3, 4, 6, 8)),
    Knob("swap_ab", (False, True)), Knob("staged", (False, True)),
    Knob("warps_m", (1, 2, 4)), Knob("stages", (2, 3, 4, 5, 6)), Knob("unroll", (1, 2)),
    Knob("wgmma", (False, True)), Knob("lead", (0, 1, 2, 3, 4)),
    Knob("shared_weights", (False, True)), Knob("half_atoms", (False, True)),
    Knob("pair_k", (False, True)), Knob("cluster_n", (1, 2, 4)),
)


def schedule_space(K: int, group_size: int, *, hopper: bool = False,
                   bits: int | None = None) -> Space[Schedule]:
    """The quantized matmul's schedules as knobs (`tune.space`): every field of
    `Schedule` but the dequantize-then-multiply pair (two launches), the converting
    producer, stream-K and split_cluster (measured slower). `cluster_n` is a knob:
    column tiles sharing x's copies lost on most problems but won one at 256 rows
    (docs/quantized-matmul.md), too few for the grid. A combination is a candidate
    where `Schedule` accepts it and it `fits` the problem, on the GPU (`hopper`: the
    wgmma kernels) and the weight width (`bits`: half atoms need an even one). Every
    schedule of `candidates` is a point."""
    def make(values: Mapping[str, object]) -> Schedule | None:
        try:
            s = Schedule(**values)  # type: ignore[arg-type]
        except ValueError:
            return None
        if s.wgmma and not hopper or s.half_atoms and bits is not None and bits % 2:
            return None
        return s if s.fits(K, group_size) else None
    return Space(KNOBS, make)


def schedule_point(space: Space[Schedule], s: Schedule) -> tuple[object, ...]:
    """`s` as a point of `space` (`schedule_space`); a `ValueError` for a schedule the
    space does not hold (the dequantize-then-multiply pair, or one that does not fit)."""
    fields = asdict(s)
    point = space.start({knob.name: fields[knob.name] for knob in space.knobs})
    if space.candidate(point) != s:
        raise ValueError(f"{s} is not a point of this schedule space (no dequant, no "
                         f"producer; it must fit the problem and the GPU)")
    return point


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
                    min_gain: float = 0.0, problem: QmmProblem | None = None
                    ) -> ScheduleSearch:
    """Anneal the schedule of this problem from `start` for at most `steps` proposals
    and `budget_s` seconds (module docstring); `problem`: its inputs, if made already."""
    if repeat < 1:
        raise ValueError(f"the search times its candidates: repeat must be >= 1, got {repeat}")
    problem = _problem(wdtype, M, N, K, group_size, seed, problem)
    space = schedule_space(K, group_size, hopper=hopper, bits=problem.wdtype.bits)
    first = schedule_point(space, start)
    with Runner([], repeat=repeat, timeout_s=timeout_s) as runner:
        def run(point: tuple[object, ...]) -> float | None:
            s = space.candidate(point)
            assert s is not None  # (the space's moves land on candidates only)
            outcome = runner.run(Candidate(problem.program(s),
                                           inputs=_registered(runner, problem, s)))
            return outcome.seconds if outcome.valid else None

        found = anneal_measured(first, space.neighbour, run, steps=steps, seed=seed,
                                budget_s=budget_s, min_gain=min_gain)
    best = space.candidate(found.annealing.best)
    assert best is not None
    return ScheduleSearch(best, found.annealing.best_s, found.start_s, found.annealing,
                          found.ran, found.repeated, found.rejected)


@dataclass(frozen=True)
class TunedKernel:
    """A kernel of the search: its schedule, and the PTX order (level 2) and edited
    machine code (level 3) it runs with (None: the compiled ones)."""

    schedule: Schedule
    ptx: str | None = None
    cubin: bytes | None = None


@dataclass(frozen=True)
class Tuned:
    """What `tune_problem` kept (`kernel`, from `start`); `after`: the kernel kept after
    each level ("start", "level 1", ...), `times_s` their medians in seconds in the
    final head-to-head; the start's spread; each level's search (None: not run); the
    final checks (None where not run); the levels undone; the wall time."""

    start: Schedule
    kernel: TunedKernel
    after: dict[str, TunedKernel]
    times_s: dict[str, float]
    spread: float
    level1: ScheduleSearch
    level2: OrderSearch
    level3: ControlSearch | None
    samples: SampleCheck | None
    sanitizers: tuple[Sanitized, ...]
    undone: tuple[str, ...]
    wall_s: float

    @property
    def schedule(self) -> Schedule:
        return self.kernel.schedule

    @property
    def kept_s(self) -> float:
        """The kept kernel's time in the final head-to-head."""
        kept = next(level for level, k in reversed(self.after.items()) if k == self.kernel)
        return self.times_s[kept]

    @property
    def speedup(self) -> float:
        """The start's time over the kept kernel's, in the final head-to-head."""
        return self.times_s["start"] / self.kept_s


def tune_problem(wdtype: DataType | str, M: int, N: int, K: int, *, start: Schedule,
                 hopper: bool, seed: int = 1, budget_s: float = 600.0,
                 level1_steps: int = 60, level2_steps: int = 150, level3_steps: int = 0,
                 group_size: int = 128, repeat: int = 20, samples: int = SAMPLES,
                 verify: bool = True, timeout_s: float = 120.0,
                 problem: QmmProblem | None = None,
                 progress: Callable[[str], None] | None = None) -> Tuned:
    """Levels 1, 2 and (with `level3_steps`) 3 from `start`, and the final checks
    (module docstring); `problem`: its inputs, if made already; `progress`, if given,
    hears of each step as it starts (its name and the seconds since the call began)."""
    began = time.monotonic()

    def step(name: str) -> None:
        if progress is not None:
            progress(f"{name} ({time.monotonic() - began:.0f} s)")

    problem = _problem(wdtype, M, N, K, group_size, seed, problem)
    shares = LEVEL_SHARES[level3_steps > 0]
    first = TunedKernel(start)
    step("timing the start's spread")
    with Runner([], repeat=repeat, timeout_s=timeout_s) as runner:
        runs = [_timed(runner, problem, first) for _ in range(SPREAD_RUNS)]
    spread = max(runs) / min(runs) - 1
    min_gain = 2 * spread

    def better(kept: TunedKernel, candidate: TunedKernel) -> TunedKernel:
        if candidate == kept:
            return kept
        old, new = _head_to_head(problem, [kept, candidate], repeat, timeout_s)
        return candidate if new < old * (1 - min_gain) else kept

    after = {"start": first}
    step("level 1: the schedule's knobs")
    level1 = search_schedule(wdtype, M, N, K, start=start, steps=level1_steps, seed=seed,
                             hopper=hopper, group_size=group_size, repeat=repeat,
                             timeout_s=timeout_s, budget_s=shares[0] * budget_s,
                             min_gain=min_gain, problem=problem)
    kept = after["level 1"] = better(first, TunedKernel(level1.best))
    program, inputs = problem.program(kept.schedule), problem.inputs(kept.schedule)
    step("level 2: the PTX order")
    level2 = search_order(program, inputs, steps=level2_steps, seed=seed, repeat=repeat,
                          timeout_s=timeout_s, budget_s=shares[1] * budget_s,
                          min_gain=min_gain)
    kept = after["level 2"] = better(kept, replace(kept, ptx=level2.ptx))
    level3 = None
    if level3_steps:
        step("level 3: the control bits")
        level3 = search_controls(program, inputs, ptx=kept.ptx, steps=level3_steps,
                                 seed=seed, repeat=repeat, timeout_s=timeout_s,
                                 budget_s=shares[2] * budget_s, min_gain=min_gain)
        kept = after["level 3"] = better(kept, replace(kept, cubin=level3.cubin))

    checks, sanitized, undone = None, (), []
    if verify:
        kept, checks, sanitized, undone = _verified(problem, after, samples, timeout_s,
                                                    step)
    step("the final head-to-head")
    distinct = list(dict.fromkeys(after.values()))
    final = dict(zip(distinct, _head_to_head(problem, distinct, repeat, timeout_s)))
    if final[kept] > final[first]:  # a keep that did not hold up: never slower
        kept = first
        undone.append("slower than the start in the final head-to-head")
    times = {level: final[k] for level, k in after.items()}
    return Tuned(start, kept, after, times, spread, level1, level2, level3, checks,
                 sanitized, tuple(undone), time.monotonic() - began)


def grid_schedule(wdtype: DataType | str, M: int, N: int, K: int, *, hopper: bool,
                  group_size: int = 128, repeat: int = 20, timeout_s: float = 120.0,
                  problem: QmmProblem | None = None) -> tuple[Schedule, float, int]:
    """The grid's best schedule of this problem timed in the runner, as the searches
    time (L2 cold, `ROUNDS` alternating rounds), without torch: (the schedule, its
    median seconds, how many were timed). The dequantize-then-multiply pairs are left
    out (two launches, which the runner does not time). `problem`: its inputs, if made
    already."""
    problem = _problem(wdtype, M, N, K, group_size, 0, problem)
    grid = [TunedKernel(s) for s in candidates(M, N, K, group_size, hopper=hopper,
                                               bits=problem.wdtype.bits) if not s.dequant]
    if not grid:
        raise ValueError(f"no single-launch schedule fits M={M} N={N} K={K}")
    times = _head_to_head(problem, grid, repeat, timeout_s)
    best = min(range(len(grid)), key=times.__getitem__)
    return grid[best].schedule, times[best], len(grid)


def _problem(wdtype: DataType | str, M: int, N: int, K: int, group_size: int, seed: int,
             given: QmmProblem | None) -> QmmProblem:
    """`given` (its random weights made once for every search of a problem), checked
    against the problem's fields, or a new one."""
    if given is None:
        return QmmProblem(wdtype, M, N, K, group_size=group_size, seed=seed)
    fields = (code_type(wdtype), M, N, K, group_size)
    if (given.wdtype, given.M, given.N, given.K, given.group_size) != fields:
        raise ValueError(f"the inputs given are of another problem: "
                         f"{given.wdtype} M={given.M} N={given.N} K={given.K} "
                         f"g{given.group_size}, not {fields[0]} M={M} N={N} K={K} "
                         f"g{group_size}")
    return given


def _registered(runner: Runner, problem: QmmProblem, s: Schedule, *,
                timed_only: bool = False) -> str:
    """The name of `s`'s input sets in `runner` (`problem.inputs`: the timed set and the
    gate set, or the timed one alone), registered there the first time."""
    name = problem.inputs_name(s) + (":timed" if timed_only else "")
    if name not in runner.inputs:
        sets = problem.inputs(s)
        runner.add_inputs(name, sets[:1] if timed_only else sets)
    return name


def _timed(runner: Runner, problem: QmmProblem, kernel: TunedKernel) -> float:
    name = _registered(runner, problem, kernel.schedule, timed_only=True)
    outcome = runner.run(_candidate(problem, kernel, name))
    if not outcome.valid or outcome.seconds is None:
        raise RuntimeError(f"{kernel.schedule} failed to run: {outcome.error}")
    return outcome.seconds


def _candidate(problem: QmmProblem, kernel: TunedKernel, inputs: str = "") -> Candidate:
    return Candidate(problem.program(kernel.schedule), kernel.ptx, inputs, kernel.cubin)


def _head_to_head(problem: QmmProblem, kernels: Sequence[TunedKernel], repeat: int,
                  timeout_s: float) -> list[float]:
    """Each kernel's median time over `ROUNDS` rounds, one run of each per round (a
    drift of the clocks weighs on all alike)."""
    times: list[list[float]] = [[] for _ in kernels]
    with Runner([], repeat=repeat, timeout_s=timeout_s) as runner:
        for _ in range(ROUNDS):
            for k, kernel in enumerate(kernels):
                times[k].append(_timed(runner, problem, kernel))
    return [statistics.median(t) for t in times]


def _verified(problem: QmmProblem, after: dict[str, TunedKernel], samples: int,
              timeout_s: float, step: Callable[[str], None]
              ) -> tuple[TunedKernel, SampleCheck, tuple[Sanitized, ...], list[str]]:
    """The final checks of the kept kernel (the last of `after`). A kernel that fails
    them is undone: the level that made it, and those that kept it, now map to the
    kernel before it in `after`, which is checked in turn, down to the start (the
    grid's, never undone). Returns the kernel that passed (or the start), its checks and
    the levels undone."""
    levels = list(after)
    undone: list[str] = []
    while True:
        kernel = after[levels[-1]]
        program = problem.program(kernel.schedule)
        moved = kernel.ptx is not None or kernel.cubin is not None
        winner = _candidate(problem, kernel)
        made = next(k for k, level in enumerate(levels) if after[level] == kernel)
        step(f"the final checks of {levels[made]}'s kernel: {samples:,} values")
        checks = check_samples(
            winner, lambda i, s=kernel.schedule: problem.sample_inputs(s, i),
            reference=Candidate(program) if moved else None,
            compare=problem.check_outputs, samples=samples, timeout_s=timeout_s)
        reports = []
        for tool in ("memcheck", "racecheck") if checks.passed else ():
            step(f"compute-sanitizer {tool}")
            reports.append(sanitize(winner, problem.inputs(kernel.schedule)[1:], tool))
        if checks.passed and all(s.clean for s in reports) or kernel == after["start"]:
            return kernel, checks, tuple(reports), undone
        undone.append(levels[made])
        for level in levels[made:]:
            after[level] = after[levels[made - 1]]
