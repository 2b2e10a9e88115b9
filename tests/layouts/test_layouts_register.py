"""Register layouts: every law of the algebra as a hypothesis property, against tables built
by brute-force enumeration.

The oracle never asks the code under test how a layout is laid out. Layouts are generated
by construction together with their expected ``[thread, local, dim]`` table:

- products of primitives: each primitive's table comes from numpy's ``unravel_index``
  (row- or column-major), and a product's table from the product law on its factors' tables;
- raw field values (random mode splits, lists, replication, size-1 modes): the table comes
  from `reference_table`, a direct transcription of the definition.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tilevm.layouts.errors import LayoutError
from tilevm.layouts.register_layout import (
    RegisterLayout,
    column_local,
    column_spatial,
    concat,
    divide,
    left_divide,
    local,
    replicated,
    spatial,
)

PRIMITIVES = {"local": local, "spatial": spatial, "column_local": column_local,
              "column_spatial": column_spatial}
BUDGET = 256  # largest num_threads * local_size a generated layout may have


# ---- the oracle --------------------------------------------------------------------------

def primitive_table(kind: str, arg: tuple[int, ...] | int, rank: int) -> np.ndarray:
    """The table of one primitive, from numpy's index arithmetic."""
    if kind == "replicated":
        return np.zeros((arg, 1, rank), dtype=np.int64)
    shape = arg
    order = "F" if kind.startswith("column_") else "C"
    coords = np.stack(np.unravel_index(np.arange(math.prod(shape)), shape, order=order), -1)
    coords = coords.reshape(-1, len(shape))
    return coords[:, None, :] if kind.endswith("spatial") else coords[None, :, :]


def product_table(ta: np.ndarray, shape_b: tuple[int, ...], tb: np.ndarray) -> np.ndarray:
    """The product law: (A*B)(tA*nB + tB, lA*lsB + lB) = A(tA, lA) * B.shape + B(tB, lB)."""
    na, la, r = ta.shape
    nb, lb, _ = tb.shape
    out = ta[:, None, :, None, :] * np.array(shape_b, dtype=np.int64) + tb[None, :, None, :, :]
    return out.reshape(na * nb, la * lb, r)


def reference_table(shape, modes, spatial_list, local_list) -> np.ndarray:
    """The definition, element by element. ``modes`` is a list of (dim, size) in mode_shape
    order; list entries are mode indices or -r for replication."""
    def digit_size(e: int) -> int:
        return -e if e < 0 else modes[e][1]

    nt = math.prod(digit_size(e) for e in spatial_list)
    ls = math.prod(digit_size(e) for e in local_list)
    out = np.zeros((nt, ls, len(shape)), dtype=np.int64)
    for t in range(nt):
        for l in range(ls):
            digit = {}
            for index, entries in ((t, spatial_list), (l, local_list)):
                for e in reversed(entries):
                    index, d = divmod(index, digit_size(e))
                    if e >= 0:
                        digit[e] = d
            for dim in range(len(shape)):
                value = 0
                for m, (md, size) in enumerate(modes):
                    if md == dim:
                        value = value * size + digit[m]
                out[t, l, dim] = value
    return out


def enumerate_table(layout: RegisterLayout) -> np.ndarray:
    """The layout's table by brute force over global_index (not via `table()`)."""
    return np.array([[layout.global_index(t, l) for l in range(layout.local_size)]
                     for t in range(layout.num_threads)], dtype=np.int64
                    ).reshape(layout.num_threads, layout.local_size, layout.ndim)


def tile_coords(shape):
    return itertools.product(*(range(s) for s in shape))


def same_function(a: RegisterLayout, ta: np.ndarray, b: RegisterLayout, tb: np.ndarray) -> bool:
    return a.shape == b.shape and ta.shape == tb.shape and np.array_equal(ta, tb)


# ---- generators (by construction) --------------------------------------------------------

@st.composite
def factor_lists(draw, rank: int, max_factors: int = 4, max_extent: int = 4,
                 replication: bool = True, budget: int = BUDGET):
    """A list of (kind, arg) primitives of one rank whose product fits the budget."""
    kinds = list(PRIMITIVES) + (["replicated"] if replication else [])
    factors, cost = [], 1
    for _ in range(draw(st.integers(1, max_factors))):
        kind = draw(st.sampled_from(kinds))
        if kind == "replicated":
            arg = draw(st.integers(2, 3))
            c = arg
        else:
            arg = tuple(draw(st.lists(st.integers(1, max_extent), min_size=rank, max_size=rank)))
            c = math.prod(arg)
        if cost * c <= budget:
            factors.append((kind, arg))
            cost *= c
    return factors


def build(factors, rank: int) -> tuple[RegisterLayout, np.ndarray]:
    """The product of the factors, and its oracle table by the product law."""
    layout = None
    table = np.zeros((1, 1, rank), dtype=np.int64)
    shape = (1,) * rank
    for kind, arg in factors:
        f = replicated(arg, ndim=rank) if kind == "replicated" else PRIMITIVES[kind](*arg)
        fshape = (1,) * rank if kind == "replicated" else arg
        table = product_table(table, fshape, primitive_table(kind, arg, rank))
        shape = tuple(a * b for a, b in zip(shape, fshape))
        layout = f if layout is None else layout * f
    if layout is None:
        layout = local(*shape)
    return layout, table


@st.composite
def products(draw, rank=None, **kw):
    rank = draw(st.integers(1, 3)) if rank is None else rank
    return build(draw(factor_lists(rank, **kw)), rank)


@st.composite
def raw_layouts(draw, rank=None, noise: bool = True):
    """Random field values: any layout the representation can express (not only products
    of primitives), plus size-1 modes and factor-1 replication when ``noise``."""
    rank = draw(st.integers(1, 3)) if rank is None else rank
    modes = []
    for dim in range(rank):
        for size in draw(st.lists(st.integers(1 if noise else 2, 4), max_size=2)):
            modes.append((dim, size))
    while math.prod(s for _, s in modes) > BUDGET // 4:
        modes.pop()
    shape = tuple(math.prod(s for d, s in modes if d == dim) for dim in range(rank))
    in_thread = [draw(st.booleans()) for _ in modes]
    spatial_list = draw(st.permutations([m for m in range(len(modes)) if in_thread[m]]))
    local_list = draw(st.permutations([m for m in range(len(modes)) if not in_thread[m]]))
    for _ in range(draw(st.integers(0, 2))):
        r = draw(st.integers(1 if noise else 2, 3))
        spatial_list.insert(draw(st.integers(0, len(spatial_list))), -r)
    fields = (shape, tuple(s for _, s in modes), tuple(spatial_list), tuple(local_list))
    return RegisterLayout(*fields), reference_table(shape, modes, spatial_list, local_list)


def layouts(rank=None):
    return st.one_of(products(rank), raw_layouts(rank))


# ---- golden sanity checks ----------------------------------------------------------------

def test_golden_primitives():
    assert [spatial(8, 4).global_index(t, 0) for t in range(32)] == \
        [(t // 4, t % 4) for t in range(32)]
    assert [local(2, 2).global_index(0, l) for l in range(4)] == [(l // 2, l % 2) for l in range(4)]
    assert [column_spatial(8, 4).global_index(t, 0) for t in range(32)] == \
        [(t % 8, t // 8) for t in range(32)]
    assert [column_local(2, 3).global_index(0, l) for l in range(6)] == \
        [(l % 2, l // 2) for l in range(6)]
    mma_c = local(2, 1).spatial(8, 4).local(1, 2)  # mma.sync m16n8 accumulator
    for lane in range(32):
        for r in range(4):
            assert mma_c.global_index(lane, r) == (lane // 4 + 8 * (r // 2), lane % 4 * 2 + r % 2)
    rep = spatial(8).replicated(4)
    assert rep.replication == 4 and rep.num_threads == 32
    assert [rep.global_index(t, 0) for t in range(32)] == [(t // 4,) for t in range(32)]


# ---- 1. function, inverse, replication ---------------------------------------------------

@given(layouts())
def test_table_matches_definition(case):
    layout, expected = case
    assert (layout.num_threads, layout.local_size, layout.ndim) == expected.shape
    assert layout.shape == tuple(int(s) for s in expected.reshape(-1, layout.ndim).max(0) + 1)
    assert np.array_equal(enumerate_table(layout), expected)
    assert np.array_equal(layout.table(), expected)


@given(layouts())
def test_owners_invert_the_function(case):
    layout, table = case
    held: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for t, l in itertools.product(range(layout.num_threads), range(layout.local_size)):
        held.setdefault(tuple(int(x) for x in table[t, l]), []).append((t, l))
    assert set(held) == set(tile_coords(layout.shape))
    expected_replication = layout.num_threads * layout.local_size // math.prod(layout.shape)
    assert layout.replication == expected_replication
    for coord, pairs in held.items():
        assert layout.owners(coord) == tuple(sorted(pairs))
        assert len(pairs) == layout.replication  # == 1 without replication: a bijection
        assert {layout.local_index(coord)} == {l for _, l in pairs}
        for t, l in pairs:
            assert layout.global_index(t, l) == coord


# ---- 2. canonical form -------------------------------------------------------------------

def resplit(draw, layout: RegisterLayout):
    """Different field values for the same function: split every mode and replication entry
    into factors (adjacent in the dim and in the list), and sprinkle size-1 modes and
    factor-1 replication entries."""
    def split(n: int) -> list[int]:
        parts = []
        for p in range(2, n + 1):
            while n % p == 0:
                n //= p
                parts.append(p)
        cut = sorted(draw(st.sets(st.integers(1, max(1, len(parts) - 1)), max_size=2)))
        pieces = [math.prod(parts[a:b]) for a, b in zip([0] + cut, cut + [len(parts)])]
        pieces = [x for x in pieces if x > 1] or [1]
        if draw(st.booleans()):
            pieces.insert(draw(st.integers(0, len(pieces))), 1)
        return pieces

    pieces = [split(n) for n in layout.mode_shape]
    first = list(itertools.accumulate([0] + [len(p) for p in pieces]))
    mode_shape = [x for p in pieces for x in p]

    def relist(entries):
        out = []
        for e in entries:
            if e < 0:
                out += [-x for x in split(-e)]
            else:
                out += range(first[e], first[e] + len(pieces[e]))
        return out

    spatial_list, local_list = relist(layout.spatial_modes), relist(layout.local_modes)
    if draw(st.booleans()):  # an extra size-1 mode somewhere
        pos = draw(st.integers(0, len(mode_shape)))
        mode_shape.insert(pos, 1)
        spatial_list = [e if e < pos else e + 1 for e in spatial_list]
        local_list = [e if e < pos else e + 1 for e in local_list]
        target = spatial_list if draw(st.booleans()) else local_list
        target.insert(draw(st.integers(0, len(target))), pos)
    return RegisterLayout(layout.shape, tuple(mode_shape), tuple(spatial_list),
                          tuple(local_list))


@given(layouts(), st.data())
def test_canonical_form_ignores_the_construction(case, data):
    layout, table = case
    other = resplit(data.draw, layout)
    assert np.array_equal(enumerate_table(other), table)
    assert other == layout and hash(other) == hash(layout)
    assert other.mode_shape == layout.mode_shape and all(s > 1 for s in layout.mode_shape)


@given(st.integers(1, 3).flatmap(lambda r: st.tuples(st.just(r), factor_lists(r))), st.data())
def test_canonical_form_of_split_factors(case, data):
    """P(.., p*q at dim i, ..) == P(s_0..s_{i-1}, p, 1..1) * P(1..1, q, s_{i+1}..) for a
    row-major primitive P (mirrored for column-major): the same function, built two ways."""
    rank, factors = case
    layout, table = build(factors, rank)
    k = data.draw(st.integers(0, len(factors)))
    factors = list(factors)
    if k < len(factors) and factors[k][0] != "replicated":
        kind, ext = factors[k]
        i = data.draw(st.integers(0, rank - 1))
        p = data.draw(st.sampled_from([d for d in range(1, ext[i] + 1) if ext[i] % d == 0]))
        q = ext[i] // p
        if kind.startswith("column_"):
            major = (1,) * i + (p,) + ext[i + 1:]
            minor = ext[:i] + (q,) + (1,) * (rank - i - 1)
        else:
            major = ext[:i] + (p,) + (1,) * (rank - i - 1)
            minor = (1,) * i + (q,) + ext[i + 1:]
        factors[k:k + 1] = [(kind, major), (kind, minor)]
    else:
        factors.insert(k, (data.draw(st.sampled_from(list(PRIMITIVES))), (1,) * rank))
    other, other_table = build(factors, rank)
    assert np.array_equal(other_table, table)
    assert other == layout and hash(other) == hash(layout)


@given(layouts(), layouts())
def test_equal_iff_same_function_small(case_a, case_b):
    """Random pairs; small ranks and extents make equal functions common."""
    (a, ta), (b, tb) = case_a, case_b
    assert (a == b) == same_function(a, ta, b, tb)
    if a == b:
        assert hash(a) == hash(b)


small_layouts = st.integers(1, 2).flatmap(
    lambda r: st.one_of(products(r, max_factors=3, max_extent=2), raw_layouts(r)))


@given(small_layouts, small_layouts)
def test_equal_iff_same_function(case_a, case_b):
    (a, ta), (b, tb) = case_a, case_b
    assert (a == b) == same_function(a, ta, b, tb)
    if a == b:
        assert hash(a) == hash(b)


@given(layouts())
def test_from_table_rebuilds_the_layout(case):
    """from_table reads a layout off its function alone; getting the same object back for
    every layout shows that different canonical forms never share a table."""
    layout, table = case
    assert RegisterLayout.from_table(table, layout.shape) == layout


@given(layouts())
def test_repr_rebuilds_the_layout(case):
    layout, _ = case
    namespace = {"RegisterLayout": RegisterLayout, "local": local, "spatial": spatial,
                 "column_local": column_local, "column_spatial": column_spatial,
                 "replicated": replicated}
    assert eval(repr(layout), namespace) == layout  # noqa: S307 - our own printer's output
    assert str(layout) == repr(layout)


def test_repr_is_fluent_when_possible():
    assert repr(local(2, 1).spatial(8, 4).local(1, 2)) == "local(2, 1).spatial(8, 4).local(1, 2)"
    assert repr(column_spatial(8, 4)) == "column_spatial(8, 4)"
    # a dim's minor mode as the major thread digit: no product of primitives
    odd = RegisterLayout((4,), (2, 2), (1, 0), ())
    assert repr(odd).startswith("RegisterLayout(shape=(4,)")


# ---- 3. product --------------------------------------------------------------------------

@given(st.integers(1, 3).flatmap(lambda r: st.tuples(*[layouts(r)] * 3)))
def test_product_law_and_associativity(cases):
    (a, ta), (b, tb), (c, tc) = cases
    ab = a * b
    assert ab.shape == tuple(x * y for x, y in zip(a.shape, b.shape))
    assert ab.num_threads == a.num_threads * b.num_threads
    assert ab.local_size == a.local_size * b.local_size
    assert ab.replication == a.replication * b.replication
    assert np.array_equal(enumerate_table(ab), product_table(ta, b.shape, tb))
    assert (a * b) * c == a * (b * c)


@given(products(2, max_factors=2), st.sampled_from(list(PRIMITIVES)),
       st.tuples(st.integers(1, 4), st.integers(1, 4)))
def test_fluent_methods_are_products(case, kind, ext):
    layout, _ = case
    assert getattr(layout, kind)(*ext) == layout * PRIMITIVES[kind](*ext)
    assert layout.replicated(3) == layout * replicated(3, ndim=2)


# ---- 4. division -------------------------------------------------------------------------

@given(st.integers(1, 3).flatmap(lambda r: st.tuples(layouts(r), layouts(r))))
def test_divide_inverts_product(cases):
    (a, _), (b, _) = cases
    assert divide(a * b, b) == a
    assert a * b / b == a
    assert left_divide(a * b, a) == b


@given(st.integers(1, 3).flatmap(lambda r: st.tuples(st.just(r), factor_lists(r, max_factors=2),
                                                     factor_lists(r, max_factors=3))),
       st.randoms(use_true_random=False))
def test_divide_by_a_wrong_factor_raises(case, rng):
    """Shuffling B's factors keeps its shape and sizes; when that changes B's function, no R
    has R * B' == A * B (the law at tR = lR = 0 would force B' == B), so divide must raise.
    The same for left division with A's factors shuffled."""
    rank, fa, fb = case
    a, ta = build(fa, rank)
    b, tb = build(fb, rank)
    c = a * b
    for factors, keep, left in ((fb, a, False), (fa, b, True)):
        shuffled = list(factors)
        rng.shuffle(shuffled)
        other, t_other = build(shuffled, rank)
        same = np.array_equal(t_other, tb if not left else ta)
        if left:
            if same:
                assert left_divide(c, other) == keep
            else:
                with pytest.raises(LayoutError):
                    left_divide(c, other)
        else:
            if same:
                assert divide(c, other) == keep
            else:
                with pytest.raises(LayoutError):
                    divide(c, other)


@given(st.integers(1, 2).flatmap(lambda r: st.tuples(layouts(r), layouts(r))))
def test_divide_never_returns_a_wrong_layout(cases):
    (c, tc), (b, tb) = cases
    try:
        r = divide(c, b)
    except LayoutError:
        pass
    else:
        assert np.array_equal(product_table(enumerate_table(r), b.shape, tb), tc)
    try:
        r = left_divide(c, b)
    except LayoutError:
        pass
    else:
        assert np.array_equal(product_table(tb, r.shape, enumerate_table(r)), tc)


def test_divide_by_a_non_suffix_raises():
    c = local(2).spatial(4)  # coord = 4 * l + t
    with pytest.raises(LayoutError):
        divide(c, local(2))  # local(2) is the major factor, not the minor one
    with pytest.raises(LayoutError):
        left_divide(c, spatial(4))
    assert divide(c, spatial(4)) == local(2) and left_divide(c, local(2)) == spatial(4)
    with pytest.raises(LayoutError, match="does not divide"):
        divide(spatial(6), spatial(4))
    with pytest.raises(LayoutError, match="rank"):
        divide(spatial(4, 1), spatial(4))


# ---- 5. reduce ---------------------------------------------------------------------------

@given(layouts(), st.data())
def test_reduce(case, data):
    layout, table = case
    dims = data.draw(st.sets(st.integers(0, layout.ndim - 1), min_size=1))
    keepdims = data.draw(st.booleans())
    reduced = layout.reduce(sorted(dims), keepdims=keepdims)
    kept = [d for d in range(layout.ndim) if d not in dims]
    rtable = enumerate_table(reduced)
    if keepdims:
        assert reduced.shape == tuple(1 if d in dims else s for d, s in enumerate(layout.shape))
        assert np.array_equal(reduced.reduce(sorted(dims), keepdims=False).table(),
                              rtable[..., kept])
        assert not rtable[..., sorted(dims)].any()
        rtable = rtable[..., kept]
    else:
        assert reduced.shape == tuple(layout.shape[d] for d in kept)
    assert reduced.num_threads == layout.num_threads  # threads keep their indices
    # the threads owning a reduced coordinate: every original owner of any of its preimages
    expected: dict[tuple[int, ...], set[int]] = {}
    got: dict[tuple[int, ...], set[int]] = {}
    for t, l in itertools.product(range(layout.num_threads), range(layout.local_size)):
        expected.setdefault(tuple(int(x) for x in table[t, l, kept]), set()).add(t)
    for t, l in itertools.product(range(reduced.num_threads), range(reduced.local_size)):
        got.setdefault(tuple(int(x) for x in rtable[t, l]), set()).add(t)
    assert got == expected
    red = sorted(dims)
    spatial_extent = len({tuple(table[t, 0, red]) for t in range(layout.num_threads)})
    local_extent = len({tuple(table[0, l, red]) for l in range(layout.local_size)})
    assert reduced.replication == layout.replication * spatial_extent
    assert reduced.local_size == layout.local_size // local_extent
    assert all(len(reduced.owners(c)) == reduced.replication
               for c in tile_coords(reduced.shape))


# ---- 6. index maps -----------------------------------------------------------------------

@given(layouts(), st.data())
def test_permute(case, data):
    layout, table = case
    order = data.draw(st.permutations(range(layout.ndim)))
    out = layout.permute(order)
    assert out.shape == tuple(layout.shape[d] for d in order)
    assert np.array_equal(enumerate_table(out), table[..., order])
    assert out.permute(np.argsort(order).tolist()) == layout


def reshaped_table(table: np.ndarray, shape, new_shape) -> np.ndarray:
    if not new_shape:
        return np.zeros(table.shape[:2] + (0,), dtype=np.int64)
    flat = np.ravel_multi_index(tuple(np.moveaxis(table, -1, 0)), shape)
    return np.stack(np.unravel_index(flat, new_shape), -1).reshape(*table.shape[:2], -1)


@st.composite
def factorizations(draw, n: int):
    """A random shape with n elements (extent-1 dims included)."""
    shape = []
    while n > 1 or draw(st.booleans()):
        d = draw(st.sampled_from([k for k in range(1, n + 1) if n % k == 0]))
        shape.append(d)
        n //= d
        if len(shape) > 4:
            break
    if n > 1:
        shape.append(n)
    return tuple(shape)


@given(layouts(), st.data())
def test_reshape(case, data):
    layout, table = case
    target = data.draw(factorizations(math.prod(layout.shape)))
    expected = reshaped_table(table, layout.shape, target)
    try:
        out = layout.reshape(target)
    except LayoutError:
        # a mode straddles a boundary: no layout computes the reshaped function at all
        with pytest.raises(LayoutError):
            RegisterLayout.from_table(expected, target)
    else:
        assert out.shape == target
        assert np.array_equal(enumerate_table(out), expected)


@given(layouts(), st.data())
def test_flatten_and_merging_dims_always_work(case, data):
    layout, table = case
    flat = layout.flatten()
    assert np.array_equal(enumerate_table(flat),
                          reshaped_table(table, layout.shape, (math.prod(layout.shape),)))
    assert flat.reshape(layout.shape) == layout
    assert layout.reshape(-1) == flat
    if layout.ndim >= 2:
        i = data.draw(st.integers(0, layout.ndim - 2))
        s = layout.shape
        merged = s[:i] + (s[i] * s[i + 1],) + s[i + 2:]
        out = layout.reshape(merged)
        assert np.array_equal(enumerate_table(out), reshaped_table(table, s, merged))
        assert out.reshape(s) == layout


@given(layouts(), st.data())
def test_squeeze_unsqueeze(case, data):
    layout, table = case
    where = sorted(data.draw(st.sets(st.integers(0, layout.ndim + 1), max_size=2)))
    where = [w for w in where if w < layout.ndim + len(where)]
    up = layout.unsqueeze(where)
    assert up.ndim == layout.ndim + len(where)
    expected = table
    for w in where:
        expected = np.insert(expected, w, 0, axis=-1)
    assert np.array_equal(enumerate_table(up), expected)
    assert up.squeeze(where) == layout
    ones = [d for d, s in enumerate(layout.shape) if s == 1]
    squeezed = layout.squeeze()
    kept = [d for d in range(layout.ndim) if d not in ones]
    assert np.array_equal(enumerate_table(squeezed), table[..., kept])


@given(layouts(), layouts())
def test_concat(case_a, case_b):
    (a, ta), (b, tb) = case_a, case_b
    out = concat(a, b)
    assert out.shape == a.shape + b.shape
    na, la, ra = ta.shape
    nb, lb, rb = tb.shape
    expected = np.concatenate([
        np.broadcast_to(ta[:, None, :, None, :], (na, nb, la, lb, ra)),
        np.broadcast_to(tb[None, :, None, :, :], (na, nb, la, lb, rb))], axis=-1)
    expected = expected.reshape(na * nb, la * lb, ra + rb)
    assert np.array_equal(enumerate_table(out), expected)


# ---- errors ------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: local(0, 2), lambda: spatial(-1), lambda: column_local(2.0), lambda: spatial(True),
    lambda: column_spatial("4"), lambda: replicated(0), lambda: replicated(2, ndim=-1),
])
def test_bad_primitive_extents(make):
    with pytest.raises(LayoutError):
        make()


def test_bad_fields():
    with pytest.raises(LayoutError, match="does not split"):
        RegisterLayout((4,), (3,), (0,), ())
    with pytest.raises(LayoutError, match="exactly once"):
        RegisterLayout((4,), (2, 2), (0,), (0,))
    with pytest.raises(LayoutError, match="only"):
        RegisterLayout((2,), (2,), (0,), (-2,))
    with pytest.raises(LayoutError, match="does not split"):
        RegisterLayout((2, 3), (3, 2), (0, 1), ())


def test_bad_operands():
    with pytest.raises(LayoutError, match="rank"):
        local(2) * local(2, 2)
    with pytest.raises(LayoutError, match="rank"):
        spatial(2).local(2, 1)
    layout = spatial(4, 2)
    with pytest.raises(LayoutError, match="thread"):
        layout.global_index(8, 0)
    with pytest.raises(LayoutError, match="local"):
        layout.global_index(0, 1)
    with pytest.raises(LayoutError, match="outside"):
        layout.owners((4, 0))
    with pytest.raises(LayoutError, match="permutation"):
        layout.permute((0,))
    with pytest.raises(LayoutError, match="twice"):
        layout.permute((0, 0))
    with pytest.raises(LayoutError, match="out of range"):
        layout.reduce(2)
    with pytest.raises(LayoutError, match="cannot reshape"):
        layout.reshape(3, 3)
    with pytest.raises(LayoutError, match="straddles"):
        spatial(2).local(3).reshape(3, 2)
    with pytest.raises(LayoutError, match="not 1"):
        layout.squeeze(0)
    with pytest.raises(LayoutError):
        RegisterLayout.from_table(np.array([[[0], [1], [3], [2]]]))  # a Gray code
