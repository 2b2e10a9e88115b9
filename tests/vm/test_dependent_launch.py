"""`tv.launch_dependents()` and `tv.wait_prerequisites()`: the frontend emits them at
the user's lines, the interpreter runs them as no-ops (blocks and launches run one after
another), and a misplaced wait is a VMError at its line."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.vm import lang as tv


@tv.kernel(num_warps=1)
def double(x: tv.ptr(tv.f32, const=True), y: tv.ptr(tv.f32), N: tv.int32):
    tv.grid(tv.cdiv(N, 32))
    tv.wait_prerequisites()  # wait line
    gx, gy = tv.global_view(x, [N]), tv.global_view(y, [N])
    v = tv.load_global(gx, [tv.block_idx(0) * 32], [32])
    tv.launch_dependents()  # launch line
    tv.store_global(gy, v * 2.0, [tv.block_idx(0) * 32])


@tv.kernel(num_warps=1)
def wait_in_loop(x: tv.ptr(tv.f32, const=True), y: tv.ptr(tv.f32), N: tv.int32):
    tv.grid(1)
    for i in tv.range(N):
        tv.wait_prerequisites()  # misplaced: in a loop
        tv.store_global(tv.global_view(y, [N]), tv.load_global(tv.global_view(x, [N]),
                                                                [i], [1]), [i])


@tv.kernel(num_warps=1)
def wait_after_store(y: tv.ptr(tv.f32)):
    tv.grid(1)
    tv.store_global(tv.global_view(y, [32]), tv.zeros([32], tv.f32), [0])
    tv.wait_prerequisites()  # misplaced: after a store


def line_of(marker: str) -> int:
    lines = inspect.getsource(inspect.getmodule(line_of)).splitlines()
    return next(i + 1 for i, text in enumerate(lines) if text.endswith(marker))


def test_frontend_emits_them_at_the_users_lines() -> None:
    program = double.specialize()
    found = [(type(s), s.loc.line) for s in program.body.body
             if isinstance(s, (ins.WaitPrerequisites, ins.LaunchDependents))]
    assert found == [(ins.WaitPrerequisites, line_of("# wait line")),
                     (ins.LaunchDependents, line_of("# launch line"))]


def test_interpreter_runs_them_as_no_ops() -> None:
    x = np.random.default_rng(0).standard_normal(100).astype(np.float32)
    y = np.full(100, np.nan, np.float32)
    double.interpret(x, y, 100)
    np.testing.assert_array_equal(y, x * 2)


@pytest.mark.parametrize("kernel, args, marker, rule", [
    (wait_in_loop, (np.zeros(4, np.float32), np.zeros(4, np.float32), 4),
     "# misplaced: in a loop", "it is inside the for body"),
    (wait_after_store, (np.zeros(32, np.float32),),
     "# misplaced: after a store", "it comes after a global write (store_global at "),
])
def test_misplaced_wait_is_an_error_at_its_line(kernel, args, marker: str,
                                                rule: str) -> None:
    with pytest.raises(VMError) as err:
        kernel.interpret(*args)
    assert err.value.message.startswith(f"wait_prerequisites: {rule}")
    assert err.value.loc is not None and err.value.loc.line == line_of(marker)


def test_they_are_part_of_the_language() -> None:
    assert {"launch_dependents", "wait_prerequisites"} <= set(tv.__all__)
    with pytest.raises(VMError, match="tv.wait_prerequisites"):
        tv.wait_prerequisites()  # outside a kernel
