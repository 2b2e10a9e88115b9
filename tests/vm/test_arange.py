"""`tv.arange`, the index tile, in the frontend and the interpreter: element (i0, i1, ...)
is i_dim, against numpy's indices; masks made from it by broadcasting; the program's
text form; and the frontend's errors at the user's line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from kernel_harness import PROGRAMS, load_module

from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.parser import parse_program
from tilevm.ir.printer import format_program
from tilevm.ir.transform import instructions
from tilevm.vm import lang as tv

k = load_module(PROGRAMS / "arange_kernels.py")


@pytest.mark.parametrize("kernel", [k.index_tiles, k.index_tiles_mma, k.index_tiles_replicated],
                         ids=lambda v: v.name)
def test_index_tiles_are_numpy_indices(kernel):
    m, n = (64, 16) if kernel is k.index_tiles_mma else (16, 32)
    rows, cols = np.full((m, n), -1, np.int32), np.full((m, n), -1, np.int32)
    kernel.interpret(rows, cols, m=m, n=n)
    want_rows, want_cols = np.indices((m, n))
    assert np.array_equal(rows, want_rows) and np.array_equal(cols, want_cols)


def test_narrow_index_tiles():
    out = np.full(256, -1, np.int16)
    k.narrow_indices.interpret(out)
    assert np.array_equal(out, np.arange(256))


@pytest.mark.parametrize("S, q0, k0", [(100, 0, 0), (40, 32, 16), (20, 5, 0), (70, 0, 30)])
def test_masks_from_broadcast_index_tiles(S, q0, k0):
    x = np.random.default_rng(S).standard_normal((32, 64)).astype(np.float32)
    out = np.zeros_like(x)
    k.masked.interpret(x, out, S, q0, k0)
    query, key = np.indices(x.shape)
    query, key = query + q0, key + k0
    assert np.array_equal(out, np.where((key <= query) & (key < S), x, -np.inf))


def test_the_instruction_and_its_text_form():
    program = k.masked.specialize()
    aranges = [i for i in instructions(program.body) if isinstance(i, ins.Arange)]
    assert [(a.dim, a.out.type.static_shape, str(a.out.dtype)) for a in aranges] == [
        (0, (32, 64), "int32"), (1, (1, 64), "int32")]
    text = format_program(program)
    assert "arange dim=0 : register<int32>[32, 64]" in text
    assert parse_program(text) == program


@tv.kernel(num_warps=1)
def bad_arange(out: tv.ptr(tv.int32), *, case: int = 0):
    g = tv.global_view(out, [4, 300])
    if case == 0:
        t = tv.arange([4, 300], dtype=tv.int32)  # no dim
    elif case == 1:
        t = tv.arange([4, 300], 2)  # dim out of range
    elif case == 2:
        t = tv.arange([4, 300], 1, tv.f32)  # a float dtype
    else:
        t = tv.arange([4, 300], 1, tv.int8)  # 299 does not fit
    tv.store_global(g, t, [0, 0])


@pytest.mark.parametrize("case, message, marker", [
    (0, "needs the dimension whose index it holds", "# no dim"),
    (1, "dimension 2 is out of range for the 2-d shape [4, 300]", "# dim out of range"),
    (2, "makes an integer tile, got dtype f32", "# a float dtype"),
    (3, "int8 does not hold the index 299 of dimension 1", "# 299 does not fit"),
])
def test_bad_arguments_are_reported_at_the_line(case, message, marker):
    with pytest.raises(VMError) as info:
        bad_arange.specialize(case=case)
    err = info.value
    assert message in err.message
    assert marker in Path(err.loc.file).read_text().splitlines()[err.loc.line - 1]
