"""Simulated annealing over candidates measured on the GPU (SIP's search).

    result = anneal(start, neighbour, measure, steps=200, seed=1)
    result.best, result.best_s, result.trace

Each step proposes a neighbour of the current state and measures it (`measure` returns
its time in seconds, or None for an invalid candidate: rejected, the search goes on).
Acceptance is Metropolis on the relative time: a faster candidate is always taken, a
slower one by `delta = t / t_current - 1` with probability `exp(-delta / T)`. The
temperature falls geometrically from `start_temperature` to `end_temperature` over the
steps. The defaults take a 5% slower candidate with probability 1/2 at the start
(T = 0.072) and a 0.5% slower one with probability 1/100 at the end (T = 0.0011): early
steps wander between orders of about equal speed, late ones only descend.

Determinism: the random stream is drawn the same way at every step (one draw for the
move, whatever it consumes, and one for the acceptance, used or not), so for one seed
and the same measurements the trajectory and the winner are the same. Measured times
vary from run to run, so decisions use them only to within `min_gain` (the caller
passes twice the measured spread): a new best must be faster than the incumbent by
more than that fraction, and the acceptance's `delta` is rounded down to a multiple of
it, so a proposal within `min_gain` of the current state counts as equal (always
taken). Two runs whose measurements differ by less than the spread then take the same
decisions, but where a ratio sits at the edge of a multiple.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Step", "AnnealResult", "anneal", "Measured", "anneal_measured"]

State = TypeVar("State", bound=Hashable)


@dataclass(frozen=True)
class Step:
    """One step: the proposal's time (None: invalid), whether it was accepted, the
    temperature, and the best time so far."""

    seconds: float | None
    accepted: bool
    temperature: float
    best_s: float


@dataclass(frozen=True)
class AnnealResult(Generic[State]):
    best: State
    best_s: float
    trace: tuple[Step, ...]


def anneal(start: State, neighbour: Callable[[State, random.Random], State],
           measure: Callable[[State], float | None], *, steps: int, seed: int,
           start_temperature: float = 0.05 / math.log(2),
           end_temperature: float = 0.005 / math.log(100), min_gain: float = 0.0,
           stop: Callable[[], bool] | None = None) -> AnnealResult[State]:
    """The annealing of the module docstring from `start` (measured first; it must be
    valid); `stop()` ends it early (a time budget)."""
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if not 0 < end_temperature <= start_temperature:
        raise ValueError(f"temperatures must satisfy 0 < end ({end_temperature}) <= start "
                         f"({start_temperature})")
    start_s = measure(start)
    if start_s is None:
        raise ValueError("the starting candidate is invalid: nothing to anneal from")
    rng = random.Random(seed)
    cooling = (end_temperature / start_temperature) ** (1 / max(1, steps - 1))
    current, current_s = start, start_s
    best, best_s = start, start_s
    temperature = start_temperature
    trace = []
    for _ in range(steps):
        if stop is not None and stop():
            break
        move = random.Random(rng.getrandbits(64))  # the move's own stream: one draw here
        draw = rng.random()  # the acceptance's draw, used or not
        proposal = neighbour(current, move)
        seconds = measure(proposal)
        accepted = False
        if seconds is not None:
            delta = _rounded(seconds / current_s - 1, min_gain)
            accepted = delta <= 0 or draw < math.exp(-delta / temperature)
            if accepted:
                current, current_s = proposal, seconds
            if seconds < best_s * (1 - min_gain):
                best, best_s = proposal, seconds
        trace.append(Step(seconds, accepted, temperature, best_s))
        temperature *= cooling
    return AnnealResult(best, best_s, tuple(trace))


def _rounded(delta: float, unit: float) -> float:
    """`delta` rounded towards 0 to a multiple of `unit` (itself when `unit` is 0)."""
    if unit <= 0:
        return delta
    return math.copysign(math.floor(abs(delta) / unit) * unit, delta)


@dataclass(frozen=True)
class Measured(Generic[State]):
    """`anneal_measured`'s result: the annealing, the start's time, and how many
    proposals were run, repeated (measured before: not run again) or rejected (invalid)."""

    annealing: AnnealResult[State]
    start_s: float
    ran: int
    repeated: int
    rejected: int


def anneal_measured(start: State, neighbour: Callable[[State, random.Random], State],
                    run: Callable[[State], float | None], *, steps: int, seed: int,
                    budget_s: float, min_gain: float = 0.0,
                    key: Callable[[State], Hashable] = lambda state: state
                    ) -> Measured[State]:
    """`anneal` over candidates that cost a GPU run each: `run(state)` (its time, or None
    for an invalid one) at most once per `key(state)`, the start's run not counted as a
    proposal, and no proposal after `budget_s` seconds."""
    seen: dict[Hashable, float | None] = {}
    counts = {"ran": 0, "repeated": 0, "rejected": 0}
    start_key = key(start)

    def measure(state: State) -> float | None:
        k = key(state)
        if k in seen:
            counts["repeated"] += 1
            return seen[k]
        seconds = seen[k] = run(state)
        if k != start_key:
            counts["ran"] += 1
            counts["rejected"] += seconds is None
        return seconds

    deadline = time.monotonic() + budget_s
    annealing = anneal(start, neighbour, measure, steps=steps, seed=seed, min_gain=min_gain,
                       stop=lambda: time.monotonic() > deadline)
    start_s = seen[start_key]
    assert start_s is not None  # (anneal refuses an invalid start)
    return Measured(annealing, start_s, **counts)
