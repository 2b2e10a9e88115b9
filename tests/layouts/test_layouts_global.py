"""Symbolic sizes and global layouts, checked against Python ints, brute-force
enumeration and numpy's own strided indexing."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tilevm.layouts.errors import LayoutError
from tilevm.layouts.global_layout import GlobalLayout
from tilevm.layouts.symbolic import (
    Expr,
    Sym,
    as_expr,
    const,
    divisible_by,
    guaranteed_divisor,
    simplify,
)

NAMES = ("M", "N", "K")

# ---- expression trees, built twice: as Exprs and as Python ints --------------------------

leaves = st.one_of(st.integers(-20, 20), st.sampled_from(NAMES))
trees = st.recursive(
    leaves,
    lambda sub: st.tuples(st.sampled_from(["+", "-", "*"]), sub, sub),
    max_leaves=8,
)


def build(tree, leaf):
    if isinstance(tree, tuple):
        op, a, b = tree
        x, y = build(a, leaf), build(b, leaf)
        return x + y if op == "+" else x - y if op == "-" else x * y
    return leaf(tree)


def as_symbolic(tree) -> Expr:
    return as_expr(build(tree, lambda v: Sym(v) if isinstance(v, str) else v))


def as_int(tree, bindings) -> int:
    return build(tree, lambda v: bindings[v] if isinstance(v, str) else v)


bindings_st = st.fixed_dictionaries({n: st.integers(-1000, 1000) for n in NAMES})


def degree_in(tree, name) -> int:
    """An upper bound on the degree of `tree` in `name`, read off the tree."""
    if isinstance(tree, tuple):
        op, a, b = tree
        da, db = degree_in(a, name), degree_in(b, name)
        return da + db if op == "*" else max(da, db)
    return 1 if tree == name else 0


# ---- symbolic ----------------------------------------------------------------------------


@given(trees, bindings_st)
def test_evaluation_matches_python_ints(tree, bindings):
    assert as_symbolic(tree).evaluate(bindings) == as_int(tree, bindings)


@given(trees, trees)
def test_equality_is_polynomial_identity(t1, t2):
    # Two polynomials are equal iff they agree on a box of (degree + 1) points per symbol.
    e1, e2 = as_symbolic(t1), as_symbolic(t2)
    axes = [range(max(degree_in(t1, n), degree_in(t2, n)) + 1) for n in NAMES]
    agree = all(as_int(t1, dict(zip(NAMES, p, strict=True)))
                == as_int(t2, dict(zip(NAMES, p, strict=True))) for p in itertools.product(*axes))
    assert (e1 == e2) == agree
    if e1 == e2:
        assert hash(e1) == hash(e2)


@given(trees, trees, trees)
def test_ring_laws_hold_in_normal_form(a, b, c):
    x, y, z = as_symbolic(a), as_symbolic(b), as_symbolic(c)
    assert (x + y) * z == x * z + y * z
    assert x * y == y * x and (x * y) * z == x * (y * z)
    assert x - x == 0 and x + 0 == x and x * 1 == x and 0 - x == -x
    assert x ** 2 == x * x


@given(trees)
def test_str_is_python_that_rebuilds_the_expression(tree):
    e = as_symbolic(tree)
    assert eval(str(e), {n: Sym(n) for n in NAMES}) == e  # our own output, Python syntax
    assert repr(e) == f"Expr({str(e)!r})"


def test_str_and_constants():
    M, K = Sym("M"), Sym("K")
    assert str(4 * M * K + 2 * K - 8) == "4*K*M + 2*K - 8"
    assert str(-M + 3) == "-M + 3" and str(M * M - 1) == "M**2 - 1" and str(M - M) == "0"
    assert (M + 2 - M) == 2 and hash(M + 2 - M) == hash(2) and {const(2): "x"}[2] == "x"
    assert simplify(M + 2 - M) == 2 and isinstance(simplify(M + 2 - M), int)
    assert (M * K).free_symbols == {"M", "K"} and (M * K).degree == 2
    assert (M * K + 1).subs({"K": 4}) == 4 * M + 1
    assert (M * K).subs({"K": M}) == M ** 2


@st.composite
def divisibility_cases(draw):
    tree = draw(st.recursive(
        st.one_of(st.integers(-64, 64), st.sampled_from(["M", "K"])),
        lambda sub: st.tuples(st.sampled_from(["+", "-", "*"]), sub, sub),
        max_leaves=6))
    facts = {name: draw(st.sampled_from([1, 2, 4, 8, 16, 128])) for name in ("M", "K")
             if draw(st.booleans())}
    return tree, facts


@given(divisibility_cases(), st.integers(1, 16))
def test_divisibility_matches_enumeration(case, n):
    # P(t) mod n has period n in each variable, so checking M = m*t, t in [0, n) is exact.
    tree, facts = case
    e = as_symbolic(tree)
    brute = all(as_int(tree, {"M": facts.get("M", 1) * tm, "K": facts.get("K", 1) * tk}) % n == 0
                for tm in range(n) for tk in range(n))
    assert divisible_by(e, n, facts) == brute
    g = guaranteed_divisor(e, facts)
    assert (g % n == 0) == brute


def test_divisibility_examples():
    M, K, t = Sym("M"), Sym("K"), Sym("t")
    assert divisible_by(64 * M + K, 16, {"K": 128})
    assert not divisible_by(64 * M + K, 16)
    assert divisible_by(K * 2, 8, {K: 4})  # a fact may name the symbol by its Expr
    assert divisible_by(t * (t + 1), 2) and divisible_by(t ** 3 - t, 6)  # not by coefficients
    assert not divisible_by(t * (t + 1), 4)
    assert guaranteed_divisor(M - M) == 0 and divisible_by(M - M, 7)
    assert guaranteed_divisor(12) == 12 and guaranteed_divisor(-12) == 12


def test_symbolic_errors():
    with pytest.raises(LayoutError, match="no value for K"):
        (Sym("M") + Sym("K")).evaluate({"M": 1})
    with pytest.raises(LayoutError, match="identifier"):
        Sym("2x")
    with pytest.raises(LayoutError, match="bound to an int"):
        Sym("M").evaluate({"M": 1.5})
    with pytest.raises(LayoutError, match="one symbol"):
        divisible_by(Sym("M"), 2, {Sym("M") * 2: 4})
    with pytest.raises(LayoutError, match="modulus"):
        divisible_by(Sym("M"), 2, {"M": 0})
    with pytest.raises(LayoutError, match="n >= 1"):
        divisible_by(Sym("M"), 0)
    with pytest.raises(LayoutError, match="not a constant"):
        _ = Sym("M").constant
    with pytest.raises(TypeError):
        _ = Sym("M") * 1.5
    with pytest.raises(LayoutError, match="int or a symbolic Expr"):
        as_expr("M")


# ---- GlobalLayout against numpy ----------------------------------------------------------

shapes = st.lists(st.integers(1, 6), min_size=1, max_size=4).map(tuple)


@st.composite
def shape_and_coord(draw, shape_strategy=shapes):
    shape = draw(shape_strategy)
    coord = tuple(draw(st.integers(0, n - 1)) for n in shape)
    return shape, coord


@given(shape_and_coord())
def test_dense_layouts_match_numpy(case):
    shape, coord = case
    n = math.prod(shape)
    assert GlobalLayout.row_major(shape).offset(coord) == np.arange(n).reshape(shape)[coord]
    assert (GlobalLayout.column_major(shape).offset(coord)
            == np.arange(n).reshape(shape, order="F")[coord])
    assert GlobalLayout.row_major(shape).num_elements == n


@given(shape_and_coord(), st.data())
def test_strided_layouts_match_numpy_as_strided(case, data):
    shape, coord = case
    strides = tuple(data.draw(st.integers(-7, 7)) for _ in shape)
    # A buffer holding its own indices; the view starts where the lowest offset lands.
    low = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides, strict=True))
    high = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides, strict=True))
    buffer = np.arange(high - low + 1, dtype=np.int64)
    view = np.lib.stride_tricks.as_strided(
        buffer[-low:], shape=shape, strides=[s * buffer.itemsize for s in strides])
    assert GlobalLayout.strided(shape, strides).offset(coord) == view[coord] + low


@st.composite
def symbolic_layouts(draw):
    """A layout whose extents are symbols or ints, with bindings and a coordinate."""
    rank = draw(st.integers(1, 4))
    bindings = {n: draw(st.integers(1, 6)) for n in NAMES}
    shape = tuple(draw(st.one_of(st.sampled_from(NAMES).map(Sym), st.integers(1, 6)))
                  for _ in range(rank))
    order = draw(st.sampled_from(["C", "F"]))
    layout = (GlobalLayout.row_major if order == "C" else GlobalLayout.column_major)(shape)
    static_shape = tuple(as_expr(n).evaluate(bindings) for n in shape)
    coord = tuple(draw(st.integers(0, n - 1)) for n in static_shape)
    return layout, bindings, static_shape, order, coord


@given(symbolic_layouts())
def test_symbolic_layouts_evaluate_like_numpy(case):
    layout, bindings, static_shape, order, coord = case
    expected = np.arange(math.prod(static_shape)).reshape(static_shape, order=order)[coord]
    symbolic_offset = layout.offset(coord)
    assert as_expr(symbolic_offset).evaluate(bindings) == expected
    static = layout.evaluate(bindings)
    assert static.is_static and static.shape == static_shape
    assert static.offset(coord) == expected
    assert layout.subs(bindings) == static
    # Symbolic coordinates too: the offset of (i, j, ...) as a polynomial in the index names.
    names = [f"i{d}" for d in range(layout.rank)]
    poly = as_expr(layout.offset([Sym(v) for v in names]))
    assert poly.evaluate({**bindings, **dict(zip(names, coord, strict=True))}) == expected


def test_symbolic_layout_examples():
    M, K = Sym("M"), Sym("K")
    a = GlobalLayout.row_major((M, K))
    assert a.strides == (K, 1) and a.offset((2, 3)) == 2 * K + 3
    assert str(a) == "GlobalLayout((M, K):(K, 1))"
    assert GlobalLayout.column_major((M, K, 2)).strides == (1, M, K * M)
    assert GlobalLayout.row_major((4, 8)).strides == (8, 1)
    assert isinstance(GlobalLayout.row_major((4, 8)).offset((1, 1)), int)
    # A row start is 16-byte aligned (8 f16 elements) once K % 128 == 0 is known.
    assert divisible_by(a.offset((Sym("r"), 0)), 8, {"K": 128})
    assert not divisible_by(a.offset((Sym("r"), 0)), 8)
    assert a.free_symbols == {"M", "K"} and not a.is_static
    assert a.subs({"K": 64}) == GlobalLayout.strided((M, 64), (64, 1))


def test_global_layout_errors():
    with pytest.raises(LayoutError, match="differ in rank"):
        GlobalLayout.strided((4, 4), (1,))
    with pytest.raises(LayoutError, match=">= 1"):
        GlobalLayout.row_major((4, 0))
    with pytest.raises(LayoutError, match="ints or symbolic"):
        GlobalLayout.row_major((4.0, 2))
    a = GlobalLayout.row_major((Sym("M"), 8))
    with pytest.raises(LayoutError, match="outside shape"):
        a.offset((0, 8))
    with pytest.raises(LayoutError, match="outside shape"):
        a.offset((-1, 0))
    with pytest.raises(LayoutError, match="rank 1"):
        a.offset((0,))
    with pytest.raises(LayoutError, match="no value for M"):
        a.evaluate({})
    with pytest.raises(LayoutError, match=">= 1"):
        a.evaluate({"M": 0})
