"""Level 2 of the search: the instruction order of one kernel's PTX, annealed on the GPU
behind a bit-exact gate.

    result = search_order(program, inputs, steps=200, seed=1)
    result.ptx, result.best_s, result.start_s

The state is one order per run of the compiled PTX (`ptx_order`). A move changes one
run, picked uniformly among those with two or more instructions: most often
(`MEMORY_MOVE`) one of its memory instructions moves to another place in its legal
window (`Run.window`), otherwise the whole run takes a fresh random legal order. Each
proposal's text is hashed, and a text seen before is not run again. A proposal runs in
the runner's child process (`runner.Runner`) on the caller's input sets; it is invalid
(rejected) when it fails there or when any output differs by one bit from the compiled
kernel's: reordering changes no arithmetic, so equality is the gate. The annealing is
`anneal.anneal_measured`'s.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tilevm.ir.stmt import Program
from tilevm.tune.anneal import AnnealResult, anneal_measured
from tilevm.tune.ptx_order import PtxOrder
from tilevm.tune.runner import Candidate, Runner
from tilevm.tune.variants import compiled_ptx

__all__ = ["OrderSearch", "search_order", "neighbour_orders", "MEMORY_MOVE"]

MEMORY_MOVE = 0.8  # the share of moves that move one memory instruction

Orders = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class OrderSearch:
    """The search's result: the best order's PTX and time against the compiled order's,
    the annealing (its trace), and how many proposals were run, repeated (an order run
    before, the compiled one included: skipped) or rejected (invalid or not bit-exact)."""

    ptx: str
    best_s: float
    start_s: float
    annealing: AnnealResult[Orders]
    ran: int
    repeated: int
    rejected: int


def neighbour_orders(order: PtxOrder, orders: Orders, rng: random.Random) -> Orders:
    """One move of the module docstring (the runs with one instruction never move)."""
    runs = order.runs
    movable = [k for k, run in enumerate(runs) if len(run.instructions) > 1]
    if not movable:
        return orders
    k = movable[rng.randrange(len(movable))]
    run, current = runs[k], list(orders[k])
    memory = [p for p, i in enumerate(current) if run.instructions[i].memory]
    if memory and rng.random() < MEMORY_MOVE:
        position = memory[rng.randrange(len(memory))]
        window = run.window(current, position)
        moving = current.pop(position)
        current.insert(window[rng.randrange(len(window))], moving)
    else:
        current = run.order(rng)
    return (*orders[:k], tuple(current), *orders[k + 1:])


def search_order(program: Program, inputs: Sequence[Sequence[Any]], *, steps: int,
                 seed: int, repeat: int = 20, timeout_s: float = 60.0,
                 budget_s: float = 600.0, min_gain: float = 0.0) -> OrderSearch:
    """Anneal the order of `program`'s compiled PTX on the input sets `inputs` (the
    interpreter's argument form) for at most `steps` proposals and `budget_s` seconds;
    each candidate timed over `repeat` (>= 1) launches."""
    if repeat < 1:
        raise ValueError(f"the search times its candidates: repeat must be >= 1, got {repeat}")
    order = PtxOrder.parse(compiled_ptx(program))
    start: Orders = tuple(tuple(range(len(run.instructions))) for run in order.runs)
    with Runner(inputs, repeat=repeat, timeout_s=timeout_s) as runner:
        reference = runner.run(Candidate(program))
        if not reference.valid:
            raise RuntimeError(f"the compiled kernel itself failed: {reference.error}")

        def run(orders: Orders) -> float | None:
            if orders == start:  # the compiled order: run already
                return reference.seconds
            outcome = runner.run(Candidate(program, order.text(orders)))
            return outcome.seconds if outcome.valid and \
                outcome.outputs == reference.outputs else None

        found = anneal_measured(
            start, lambda s, rng: neighbour_orders(order, s, rng), run, steps=steps,
            seed=seed, budget_s=budget_s, min_gain=min_gain,
            key=lambda orders: hashlib.sha256(order.text(orders).encode()).hexdigest())
    return OrderSearch(order.text(found.annealing.best), found.annealing.best_s,
                       found.start_s, found.annealing, found.ran, found.repeated,
                       found.rejected)
