"""Level 3 of the search (sm_90, behind a flag): the control bits of one kernel's SASS
(`sass_control`), annealed on the GPU behind the bit-exact gate.

    result = search_controls(program, inputs, steps=200, seed=1, ptx=level2_ptx)
    result.cubin, result.best_s, result.start_s

The PTX (the compiled text, or a variant such as level 2's order) is assembled with
ptxas for the device's architecture; that cubin is the start. The state is the
kernel's control bits, one `Control` per instruction. A move picks one instruction at
random and makes one safe edit of it (`Control.is_safe_from` its original bits):

- its stall one cycle up, or down again as far as the original;
- its yield bit flipped;
- one of the original's reuse bits cleared, or set back.

A proposal nvdisasm does not decode to the same instructions is rejected without a run
(`sass_control.same_instructions`: some stall and yield values are no instruction).
The others run in the runner's child process on the caller's input sets, rejected when
they fail there or when any output differs by one bit from the compiled kernel's (the
gate: safe edits change no arithmetic).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tilevm.backend.launch import current_arch
from tilevm.backend.ptxas import assemble
from tilevm.ir.stmt import Program
from tilevm.tune.anneal import AnnealResult, anneal_measured
from tilevm.tune.runner import Candidate, Runner
from tilevm.tune.sass_control import (
    MAX_STALL,
    Control,
    Cubin,
    disassemble,
    same_instructions,
)
from tilevm.tune.variants import compiled_ptx

__all__ = ["ControlSearch", "search_controls", "neighbour_controls", "machine_code"]

Controls = tuple[Control, ...]


@dataclass(frozen=True)
class ControlSearch:
    """The best cubin found and its time against the unedited cubin's, the annealing,
    and how many proposals were run, repeated (skipped) or rejected (not decoded, invalid
    or not bit-exact)."""

    cubin: bytes
    best_s: float
    start_s: float
    annealing: AnnealResult[Controls]
    ran: int
    repeated: int
    rejected: int


def machine_code(program: Program, ptx: str | None = None) -> Cubin:
    """The cubin ptxas makes of `ptx` (default: `program`'s compiled PTX) for the
    current device."""
    arch = current_arch()
    return Cubin(assemble(ptx if ptx is not None else compiled_ptx(program, arch), arch))


def neighbour_controls(original: Controls, controls: Controls, rng: random.Random
                       ) -> Controls:
    """One safe edit of one instruction (module docstring)."""
    i = rng.randrange(len(controls))
    base, now = original[i], controls[i]
    moves = []
    if now.stall < MAX_STALL:
        moves.append(replace(now, stall=now.stall + 1))
    if now.stall > base.stall:
        moves.append(replace(now, stall=now.stall - 1))
    moves.append(replace(now, yield_=1 - now.yield_))
    moves += [replace(now, reuse=now.reuse ^ (1 << b)) for b in range(4)
              if base.reuse >> b & 1]
    edited = moves[rng.randrange(len(moves))]
    assert edited.is_safe_from(base)
    return (*controls[:i], edited, *controls[i + 1:])


def search_controls(program: Program, inputs: Sequence[Sequence[Any]], *, steps: int,
                    seed: int, ptx: str | None = None, repeat: int = 20,
                    timeout_s: float = 60.0, budget_s: float = 600.0,
                    min_gain: float = 0.0) -> ControlSearch:
    """Anneal the control bits of `program`'s kernel (assembled from `ptx`, default its
    compiled PTX) on the input sets `inputs` for at most `steps` proposals and
    `budget_s` seconds; each candidate timed over `repeat` (>= 1) launches."""
    if repeat < 1:
        raise ValueError(f"the search times its candidates: repeat must be >= 1, got {repeat}")
    cubin = machine_code(program, ptx)
    kernel = cubin.kernel(program.name)
    original = kernel.controls()
    lines = disassemble(cubin)
    if lines is None:
        raise RuntimeError("nvdisasm does not decode the cubin ptxas made: no edit of it "
                           "can be checked")

    def edited(controls: Controls) -> Cubin:
        return cubin.with_controls(program.name, {
            i: c for i, (c, o) in enumerate(zip(controls, original, strict=True)) if c != o})

    with Runner(inputs, repeat=repeat, timeout_s=timeout_s) as runner:
        reference = runner.run(Candidate(program))
        if not reference.valid:
            raise RuntimeError(f"the compiled kernel itself failed: {reference.error}")

        def run(controls: Controls) -> float | None:
            candidate = edited(controls)
            if controls != original and not same_instructions(lines, candidate):
                return None
            outcome = runner.run(Candidate(program, cubin=candidate.data))
            return outcome.seconds if outcome.valid and \
                outcome.outputs == reference.outputs else None

        # (a state is its own key: control bits and machine code map one to one, so
        # no cubin is built, nor hashed, to find a repeat)
        found = anneal_measured(
            original, lambda s, rng: neighbour_controls(original, s, rng), run,
            steps=steps, seed=seed, budget_s=budget_s, min_gain=min_gain)
    return ControlSearch(edited(found.annealing.best).data, found.annealing.best_s,
                         found.start_s, found.annealing, found.ran, found.repeated,
                         found.rejected)
