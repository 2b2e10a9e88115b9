"""`launch_dependents` and `wait_prerequisites` (programmatic dependent launch) in the IR:
the text form, and the verifier's placement rule for the wait (top level, before the
first global write), each rejection at the offending line."""

from __future__ import annotations

import pytest

from tilevm.ir import instructions as ins
from tilevm.ir.builder import Builder
from tilevm.ir.errors import SourceLoc, VMError
from tilevm.ir.expr import Binary, BlockIndex, const
from tilevm.ir.parser import parse_program
from tilevm.ir.printer import format_program
from tilevm.ir.stmt import Program
from tilevm.ir.verifier import verify


def copy_kernel(*, wait_at: str = "top", launch_at: str = "top",
                atomic: bool = False) -> Program:
    """y[i] = x[i] over 128 elements a block; the n-th located statement is at line n
    of k.py. `wait_at`: "top", "loop" (inside a for), "branch" (inside an if),
    "after_store" (after the store), "none"; `launch_at`: "top", "loop", "end", "none";
    `atomic`: an atomic_add first of all."""
    b = Builder("copy", num_warps=4)
    px = b.pointer_param("x", "f32", readonly=True)
    py = b.pointer_param("y", "f32")
    pc = b.pointer_param("count", "int32")
    n = b.scalar_param("N")
    b.set_grid(n)
    line = iter(range(1, 100))

    def at() -> None:
        b.loc = SourceLoc("k.py", next(line))

    if atomic:
        at()
        b.atomic_add(b.global_view(pc, (1,)), (0,), 1)
    if wait_at == "top":
        at()
        b.wait_prerequisites()
    if launch_at == "top":
        at()
        b.launch_dependents()
    at()
    gx, gy = b.global_view(px, (n,)), b.global_view(py, (n,))
    with b.for_range(0, 1, name="r"):
        if wait_at == "loop":
            at()
            b.wait_prerequisites()
        if launch_at == "loop":
            at()
            b.launch_dependents()
    with b.if_then(Binary(">=", BlockIndex(0), const(0))):
        if wait_at == "branch":
            at()
            b.wait_prerequisites()
    at()
    offset = (Binary("*", BlockIndex(0), const(128)),)
    b.store_global(gy, b.load_global(gx, offset, (128,)), offset)
    if wait_at == "after_store":
        at()
        b.wait_prerequisites()
    if launch_at == "end":
        at()
        b.launch_dependents()
    return b.build()


def test_text_round_trip() -> None:
    program = copy_kernel(launch_at="end")
    text = format_program(program)
    assert "  wait_prerequisites  @ " in text and "  launch_dependents  @ " in text
    assert format_program(parse_program(text)) == text
    with_lowering = text.replace("  wait_prerequisites  @", "  wait_prerequisites "
                                 "lowering=griddepcontrol  @")
    parsed = parse_program(with_lowering)
    wait = next(s for s in parsed.body.body if isinstance(s, ins.WaitPrerequisites))
    assert wait.lowering == ins.lowering("griddepcontrol")
    assert format_program(parsed) == with_lowering


@pytest.mark.parametrize("launch_at", ["top", "loop", "end", "none"])
def test_launch_dependents_may_stand_anywhere(launch_at: str) -> None:
    verify(copy_kernel(launch_at=launch_at))
    verify(copy_kernel(wait_at="none", launch_at=launch_at))


@pytest.mark.parametrize("wait_at, line, message", [
    ("loop", 2, "wait_prerequisites: it is inside the for body; it must be at the top "
                "level of the kernel's body, where every thread executes it once"),
    ("branch", 2, "wait_prerequisites: it is inside the if body; it must be at the top "
                  "level of the kernel's body, where every thread executes it once"),
    ("after_store", 3, "wait_prerequisites: it comes after a global write (store_global "
                       "at k.py:2); an earlier kernel may still read or write that memory, "
                       "so the wait must come before every store_global and atomic_add"),
])
def test_misplaced_wait_is_rejected_at_its_line(wait_at: str, line: int,
                                                message: str) -> None:
    with pytest.raises(VMError) as err:
        verify(copy_kernel(wait_at=wait_at, launch_at="none"))
    assert err.value.message == message
    assert err.value.loc == SourceLoc("k.py", line)
    assert err.value.instruction == "wait_prerequisites"


def test_wait_after_an_atomic_add_is_rejected() -> None:
    with pytest.raises(VMError) as err:
        verify(copy_kernel(atomic=True, launch_at="none"))
    assert "after a global write (atomic_add at k.py:1)" in err.value.message
    assert err.value.loc == SourceLoc("k.py", 2)


def test_global_reads_before_the_wait_are_allowed() -> None:
    """Reading data no earlier kernel writes (weights) before the wait is the point of
    overlapping: only writes must follow it."""
    b = Builder("prefetch", num_warps=4)
    pw = b.pointer_param("w", "f32", readonly=True)
    py = b.pointer_param("y", "f32")
    gw, gy = b.global_view(pw, (128,)), b.global_view(py, (128,))
    w = b.load_global(gw, (0,), (128,))
    b.wait_prerequisites()
    b.store_global(gy, w, (0,))
    verify(b.build())
