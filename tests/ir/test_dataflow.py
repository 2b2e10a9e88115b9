"""`ir.dataflow.walk` against hand-worked states: straight code, an `if` with and
without `else`, a loop that settles, a backward walk."""

from __future__ import annotations

from tilevm.dtypes import parse
from tilevm.ir import instructions as ins
from tilevm.ir.dataflow import walk
from tilevm.ir.expr import Const
from tilevm.ir.stmt import For, If, Seq

SYNC = ins.Sync()
COMMIT = ins.CopyAsyncCommit()
COND = Const(True, parse("uint1"))


def _count_commits(inst: ins.Instruction, state: int) -> int:
    """A capped count of commits since the last sync (a finite, monotone state)."""
    if isinstance(inst, ins.Sync):
        return 0
    return min(state + 1, 5) if isinstance(inst, ins.CopyAsyncCommit) else state


def _loop(*body) -> For:
    from tilevm.ir.expr import Var

    i = Var("i", parse("int32"))
    return For(var=i, start=Const(0, parse("int32")), stop=Const(4, parse("int32")),
               step=Const(1, parse("int32")), body=Seq(body=body))


def test_straight_code_and_branches():
    assert walk(Seq(body=(COMMIT, COMMIT, SYNC, COMMIT)), 0, _count_commits, max) == 1
    branch = If(cond=COND, then_body=Seq(body=(COMMIT, COMMIT)), else_body=None)
    assert walk(Seq(body=(COMMIT, branch)), 0, _count_commits, max) == 3  # or 1: join
    both = If(cond=COND, then_body=Seq(body=(SYNC,)), else_body=Seq(body=(COMMIT,)))
    assert walk(Seq(body=(COMMIT, both)), 0, _count_commits, max) == 2


def test_a_loop_settles_at_its_heads_join():
    # each trip adds one: the head's state grows to the cap; zero trips leave 0 + 1
    assert walk(Seq(body=(COMMIT, _loop(COMMIT))), 0, _count_commits, max) == 5
    # a sync in the body: the head settles at max(entry, 1)
    assert walk(Seq(body=(COMMIT, COMMIT, _loop(SYNC, COMMIT))), 0, _count_commits,
                max) == 2


def test_the_last_walk_of_a_loop_body_sees_the_settled_state():
    seen: dict[int, int] = {}

    def record(inst, state):
        seen[id(inst)] = state
        return _count_commits(inst, state)

    inner = ins.CopyAsyncCommit()
    walk(Seq(body=(_loop(inner),)), 0, record, max)
    assert seen[id(inner)] == 5


def test_backward():
    # commits until the next sync, counted from each point backward
    seq = Seq(body=(COMMIT, SYNC, COMMIT, COMMIT))
    assert walk(seq, 0, _count_commits, max, backward=True) == 1
    assert walk(Seq(body=(COMMIT, COMMIT)), 0, _count_commits, max, backward=True) == 2
