"""`@tv.inline` helpers: compiled into the calling kernel, so they may hold `tv.range`
loops and runtime `if`s and return values; checked in the interpreter against numpy,
with their errors at the helper's own line."""

from __future__ import annotations

import numpy as np
import pytest

from tilevm.ir.errors import VMError
from tilevm.ir.printer import format_program
from tilevm.vm import lang as tv

BLOCK = 64


@tv.inline
def row_sum(g, row, columns, block):
    """The sum of the `columns` blocks of row `row` of `g` (flat): a runtime loop."""
    acc = tv.zeros([block], tv.f32)
    for c in tv.range(0, columns):
        acc = acc + tv.load_global(g, [(row * columns + c) * block], [block])
    return acc


@tv.inline
def clipped(v, limit, flag):
    """A runtime `if` on a scalar, then a nested inline call's result."""
    if flag > 0:
        v = tv.minimum(v, limit)
    return twice(v)


@tv.inline
def twice(v):
    return v * 2.0


@tv.kernel(num_warps=2)
def rows(x: tv.ptr(tv.f32, const=True), out: tv.ptr(tv.f32), columns: tv.int32,
         flag: tv.int32, *, block: int = BLOCK):
    tv.grid(4)
    r = tv.block_idx(0)
    gx = tv.global_view(x, [4 * columns * block])
    total = tv.zeros([block], tv.f32)
    for _ in tv.range(0, 2):  # the helper inside the kernel's own runtime loop
        total = total + row_sum(gx, r, columns, block)
    tv.store_global(tv.global_view(out, [4 * block]), clipped(total, 3.0, flag), [r * block])


@pytest.mark.parametrize("columns, flag", [(1, 0), (3, 1), (5, 0)])
def test_inline_helpers_compute_what_numpy_does(columns, flag):
    rng = np.random.default_rng(columns)
    x = rng.standard_normal((4, columns * BLOCK)).astype(np.float32)
    out = np.zeros(4 * BLOCK, np.float32)
    rows.interpret(x, out, columns, flag)
    total = 2 * x.reshape(4, columns, BLOCK).astype(np.float64).sum(axis=1)
    want = 2 * (np.minimum(total, 3.0) if flag else total)
    assert np.allclose(out.reshape(4, BLOCK), want, rtol=1e-5, atol=1e-5)


def test_the_helpers_loop_is_an_ir_loop_at_the_helpers_line():
    text = format_program(rows.specialize())
    loops = [line for line in text.splitlines() if line.lstrip().startswith("for ")]
    assert len(loops) == 2  # the kernel's own and the helper's, not unrolled
    helper_line = row_sum.fn.__code__.co_firstlineno + 4  # its `for` statement
    assert any(f'test_inline.py":{helper_line}' in line for line in loops)


@tv.inline
def returns_in_a_loop(n):
    for i in tv.range(0, n):
        return i


@tv.kernel(num_warps=1)
def bad_return(n: tv.int32):
    tv.grid(1)
    returns_in_a_loop(n)


@tv.inline
def wrong_shapes(a):
    return a + tv.zeros([3], tv.f32)


@tv.kernel(num_warps=1)
def bad_shapes(x: tv.ptr(tv.f32, const=True)):
    tv.grid(1)
    wrong_shapes(tv.load_global(tv.global_view(x, [8]), [0], [8]))


@tv.kernel(num_warps=1)
def bad_arguments(x: tv.ptr(tv.f32, const=True)):
    tv.grid(1)
    twice()


def test_errors_point_at_the_helpers_line_or_name_the_call():
    with pytest.raises(VMError, match="`return` inside a runtime for loop") as caught:
        bad_return.specialize()
    assert f"test_inline.py:{returns_in_a_loop.fn.__code__.co_firstlineno + 3}" in \
        str(caught.value)
    with pytest.raises(VMError) as caught:
        bad_shapes.specialize()
    assert f"test_inline.py:{wrong_shapes.fn.__code__.co_firstlineno + 2}" in str(caught.value)
    with pytest.raises(VMError, match="twice\\(\\): missing a required argument: 'v'"):
        bad_arguments.specialize()
    with pytest.raises(VMError, match="can only be used inside a @tv.kernel"):
        twice(1.0)
    with pytest.raises(VMError, match="@tv.inline decorates a function"):
        tv.inline(3)
