"""Dataflow over structured programs: one walk for the analyses that follow a state
through a program's instructions, branches and loops (the wgmma waits, the TMA ring).

A state is any value with `==`; `step(inst, state)` is an instruction's transfer and
`join(a, b)` merges the states of two paths that meet. For loops to settle, `join` must
be monotone over finitely many states (a union of sets drawn from a finite family, a
maximum that the analysis caps, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tilevm.ir.instructions import Instruction
from tilevm.ir.stmt import For, If, Seq

State = TypeVar("State")


def walk(seq: Seq, state: State, step: Callable[[Instruction, State], State],
         join: Callable[[State, State], State], *, backward: bool = False) -> State:
    """The state after `seq` given the state before it (`backward`: before it, given
    after). An `if` without `else` joins the branch with the state that skips it; a loop
    runs zero or more times, so its head's state is joined with its body's end until it
    no longer changes, and the last walk of the body is with that settled state (what
    `step` records about an instruction in a loop, it records last for its settled
    state). Scalar statements (`let`, assignments) change no state."""
    for stmt in reversed(seq.body) if backward else seq.body:
        if isinstance(stmt, Instruction):
            state = step(stmt, state)
        elif isinstance(stmt, Seq):
            state = walk(stmt, state, step, join, backward=backward)
        elif isinstance(stmt, If):
            then = walk(stmt.then_body, state, step, join, backward=backward)
            other = state if stmt.else_body is None else \
                walk(stmt.else_body, state, step, join, backward=backward)
            state = join(then, other)
        elif isinstance(stmt, For):
            head = state
            while (new := join(head, walk(stmt.body, head, step, join,
                                          backward=backward))) != head:
                head = new
            state = head
    return state
