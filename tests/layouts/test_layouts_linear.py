"""The GF(2) linear view: linearity, agreement with the primary form, algebra laws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tilevm.layouts.errors import LayoutError
from tilevm.layouts.fragments import ldmatrix, mma_m16n8k16_a, mma_m16n8k16_c, mma_m16n8k32_a
from tilevm.layouts.linear import (
    LinearMap,
    contiguous_local_bits,
    decode_coord,
    dim_bit_offsets,
    encode_coord,
    from_linear,
    to_linear,
    vector_width,
)
from tilevm.layouts.register_layout import (
    column_local,
    column_spatial,
    local,
    replicated,
    spatial,
)

PRIMITIVES = [local, spatial, column_local, column_spatial]


@st.composite
def pow2_layouts(draw: st.DrawFn, ndim: int | None = None, budget: int = 10):
    """Products of 1..4 random power-of-two primitives (every extent in {1, 2, 4}, and
    replication factors in {2, 4}), with at most 2**budget (thread, local) points."""
    ndim = draw(st.integers(1, 3)) if ndim is None else ndim
    result = None
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.integers(0, 5)) == 0:
            part = replicated(draw(st.sampled_from([2, 4])), ndim)
        else:
            prim = draw(st.sampled_from(PRIMITIVES))
            part = prim(*draw(st.lists(st.sampled_from([1, 2, 4]), min_size=ndim,
                                       max_size=ndim)))
        if result is not None and (result.num_threads * result.local_size * part.num_threads
                                   * part.local_size > 1 << budget):
            break
        result = part if result is None else result * part
    return result


def _bijective(layout) -> bool:
    return layout.num_threads * layout.local_size == math.prod(layout.shape) \
        and to_linear(layout).is_bijective


@st.composite
def linear_maps(draw: st.DrawFn, in_bits: int, out_bits: int) -> LinearMap:
    cols = draw(st.lists(st.integers(0, (1 << out_bits) - 1), min_size=in_bits,
                         max_size=in_bits))
    return LinearMap(in_bits, out_bits, tuple(cols))


@st.composite
def invertible_maps(draw: st.DrawFn, bits: int) -> LinearMap:
    """L * P * U with L, U unit triangular and P a permutation: every invertible matrix
    has such a (Bruhat) factorization, and every such product is invertible."""
    perm = draw(st.permutations(range(bits)))
    lower = [(1 << j) | (draw(st.integers(0, (1 << bits) - 1)) & ~((2 << j) - 1))
             for j in range(bits)]
    upper = [(1 << j) | (draw(st.integers(0, (1 << j) - 1)) if j else 0) for j in range(bits)]
    lo = LinearMap(bits, bits, tuple(lower))
    up = LinearMap(bits, bits, tuple(upper))
    p = LinearMap(bits, bits, tuple(1 << perm[j] for j in range(bits)))
    return lo.compose(p).compose(up)


# ---- the view of a layout ---------------------------------------------------------------
@given(pow2_layouts(), st.data())
def test_linearity(layout, data):
    lin = to_linear(layout)
    assert lin.in_bits == (layout.num_threads * layout.local_size).bit_length() - 1
    assert lin.out_bits == math.prod(layout.shape).bit_length() - 1
    n = 1 << lin.in_bits
    for _ in range(8):
        x = data.draw(st.integers(0, n - 1))
        y = data.draw(st.integers(0, n - 1))
        assert lin.apply(x ^ y) == lin.apply(x) ^ lin.apply(y)


@given(pow2_layouts())
def test_agrees_with_the_layout_on_every_point(layout):
    lin = to_linear(layout)
    for t in range(layout.num_threads):
        for loc in range(layout.local_size):
            got = decode_coord(layout.shape, lin.apply(t * layout.local_size + loc))
            assert got == tuple(layout.global_index(t, loc))


@given(pow2_layouts())
def test_inverse_of_a_bijective_layout(layout):
    lin = to_linear(layout)
    if not _bijective(layout):
        assert not lin.is_bijective
        with pytest.raises(LayoutError):
            lin.inverse()
        return
    inv = lin.inverse()
    ident = LinearMap.identity(lin.in_bits)
    assert inv.compose(lin) == ident
    assert lin.compose(inv) == ident
    # The inverse answers "who holds this element".
    for coord in [(0,) * layout.ndim, tuple(s - 1 for s in layout.shape)]:
        t, loc = divmod(inv.apply(encode_coord(layout.shape, coord)), layout.local_size)
        assert tuple(layout.global_index(t, loc)) == coord


@given(pow2_layouts())
def test_rank_and_kernel(layout):
    lin = to_linear(layout)
    kernel = lin.kernel()
    assert lin.rank + len(kernel) == lin.in_bits
    assert all(lin.apply(k) == 0 for k in kernel)
    # Every element of the tile is held by someone iff the map is onto.
    held = {tuple(c) for c in np.asarray(layout.table()).reshape(-1, layout.ndim).tolist()}
    assert lin.is_surjective == (len(held) == math.prod(layout.shape))
    assert lin.is_injective == (len(held) == layout.num_threads * layout.local_size)


@given(pow2_layouts(ndim=2, budget=6), pow2_layouts(ndim=2, budget=6), st.data())
def test_product_of_views(a, b, data):
    # (A*B)(tA*|B|+tB, lA*|B|+lB) = A(tA, lA) * B.shape + B(tB, lB): in bits, the view of a
    # product sends A's input bits to A's output bits shifted above B's, per dimension.
    ab, la, lb = to_linear(a * b), to_linear(a), to_linear(b)
    for _ in range(16):
        x = data.draw(st.integers(0, (1 << la.in_bits) - 1))
        y = data.draw(st.integers(0, (1 << lb.in_bits) - 1))
        (ta, loca), (tb, locb) = divmod(x, a.local_size), divmod(y, b.local_size)
        ca, cb = decode_coord(a.shape, la.apply(x)), decode_coord(b.shape, lb.apply(y))
        xy = (ta * b.num_threads + tb) * (a.local_size * b.local_size) \
            + loca * b.local_size + locb
        want = tuple(p * s + q for p, s, q in zip(ca, b.shape, cb, strict=True))
        assert decode_coord((a * b).shape, ab.apply(xy)) == want


@given(pow2_layouts())
def test_from_linear_round_trip(layout):
    assert from_linear(to_linear(layout), layout.shape, layout.local_size) == layout


def test_from_linear_refuses_a_swizzle():
    # 4x4 tile, 16 threads x 1 local; lane bit 0 goes to column bits 0 and 1 (an XOR).
    cols = (0b0011, 0b0010, 0b0100, 0b1000)
    with pytest.raises(LayoutError):
        from_linear(LinearMap(4, 4, cols), (4, 4), 1)
    with pytest.raises(LayoutError, match="does not fit"):
        from_linear(LinearMap.identity(4), (4, 8), 1)


def test_conversion_map_between_two_layouts():
    # mma C and ldmatrix.x2 both spread a 16x8 tile over a warp; L_ld^-1 . L_c maps each
    # C-fragment slot to the ldmatrix slot of the same element.
    c, ld = mma_m16n8k16_c(), ldmatrix(2)
    conv = to_linear(ld).inverse().compose(to_linear(c))
    for x in range(32 * 4):
        tc, lc = divmod(x, 4)
        tl, ll = divmod(conv.apply(x), 4)
        assert tuple(ld.global_index(tl, ll)) == tuple(c.global_index(tc, lc))


# ---- failures ---------------------------------------------------------------------------
@pytest.mark.parametrize("layout", [spatial(3, 2), local(6), local(2, 1) * spatial(4, 3),
                                    column_spatial(8, 4) * local(1, 3)])
def test_non_power_of_two_raises(layout):
    with pytest.raises(LayoutError, match="powers of two"):
        to_linear(layout)


class _Affine:
    """A power-of-two stand-in that is not linear: every coordinate is shifted by one."""

    shape = (4, 4)
    ndim = 2
    num_threads = 4
    local_size = 4

    def global_index(self, t: int, l: int) -> tuple[int, int]:
        return (t, (l + 1) % 4)

    def table(self) -> np.ndarray:
        return np.array([[self.global_index(t, l) for l in range(4)] for t in range(4)])


def test_non_linear_layout_raises():
    with pytest.raises(LayoutError, match="not GF.2.-linear"):
        to_linear(_Affine())


# ---- the algebra of LinearMap -----------------------------------------------------------
dims = st.integers(0, 6)


@given(st.data(), dims, dims, dims, dims)
def test_compose_is_associative(data, i, j, k, m):
    a = data.draw(linear_maps(k, m))
    b = data.draw(linear_maps(j, k))
    c = data.draw(linear_maps(i, j))
    assert a.compose(b).compose(c) == a.compose(b.compose(c))
    x = data.draw(st.integers(0, (1 << i) - 1))
    assert a.compose(b).compose(c).apply(x) == a.apply(b.apply(c.apply(x)))


@given(st.data(), st.integers(0, 7))
def test_inverse_laws(data, n):
    a = data.draw(invertible_maps(n))
    b = data.draw(invertible_maps(n))
    ident = LinearMap.identity(n)
    assert a.is_bijective and a.rank == n
    assert a.inverse().compose(a) == ident == a.compose(a.inverse())
    assert a.inverse().inverse() == a
    assert a.compose(b).inverse() == b.inverse().compose(a.inverse())
    assert ident.compose(a) == a == a.compose(ident)


@given(st.data(), st.integers(0, 6), st.integers(0, 6))
def test_solve_and_singular(data, n_in, n_out):
    a = data.draw(linear_maps(n_in, n_out))
    image = {a.apply(x) for x in range(1 << n_in)}
    assert len(image) == 1 << a.rank
    for y in range(1 << n_out):
        x = a.solve(y)
        assert (x is not None) == (y in image)
        if x is not None:
            assert a.apply(x) == y
    if not a.is_bijective:
        with pytest.raises(LayoutError):
            a.inverse()


@given(st.data(), st.integers(0, 6), st.integers(0, 6))
def test_matrix_round_trip_and_vectorized_apply(data, n_in, n_out):
    a = data.draw(linear_maps(n_in, n_out))
    m = a.matrix()
    assert m.shape == (n_out, n_in)
    assert LinearMap.from_matrix(m) == a
    xs = np.arange(1 << n_in)
    np.testing.assert_array_equal(a.apply_array(xs), [a.apply(int(x)) for x in xs])
    # matrix-vector product mod 2 is the same map
    for x in data.draw(st.lists(st.integers(0, (1 << n_in) - 1), max_size=8)):
        vec = np.array([(x >> j) & 1 for j in range(n_in)], dtype=np.int64)
        out = (m.astype(np.int64) @ vec) % 2 if n_in else np.zeros(n_out, np.int64)
        assert sum(int(b) << i for i, b in enumerate(out)) == a.apply(x)


def test_bad_maps():
    with pytest.raises(LayoutError, match="columns"):
        LinearMap(2, 2, (1,))
    with pytest.raises(LayoutError, match="does not fit"):
        LinearMap(1, 2, (4,))
    with pytest.raises(LayoutError, match="compose"):
        LinearMap.identity(2).compose(LinearMap.identity(3))
    with pytest.raises(LayoutError, match="not square"):
        LinearMap.zero(2, 3).inverse()
    with pytest.raises(LayoutError, match="singular"):
        LinearMap(2, 2, (1, 1)).inverse()
    with pytest.raises(LayoutError):
        LinearMap.identity(2).apply(4)


def test_bit_order_conventions():
    # input = thread * local_size + local; output = row-major offset (last dim lowest).
    assert dim_bit_offsets((4, 1, 8)) == (3, 3, 0)
    assert encode_coord((4, 8), (3, 5)) == 3 * 8 + 5
    assert decode_coord((4, 8), 29) == (3, 5)
    lin = to_linear(mma_m16n8k16_c())  # local bits: j (col bit 0), v (row bit 3)
    assert lin.columns[0] == encode_coord((16, 8), (0, 1))
    assert lin.columns[1] == encode_coord((16, 8), (8, 0))
    assert lin.columns[2] == encode_coord((16, 8), (0, 2))  # lane bit 0 -> col bit 1


# ---- vector width -----------------------------------------------------------------------
def _brute_vector_width(layout, dim: int) -> int:
    """Largest power of two w: every aligned run of w locals holds w consecutive elements
    along `dim`, starting at a multiple of w."""
    w = layout.local_size
    while w > 1:
        ok = True
        for t in range(layout.num_threads):
            for base in range(0, layout.local_size, w):
                c0 = tuple(layout.global_index(t, base))
                if c0[dim] % w:
                    ok = False
                for i in range(w):
                    want = c0[:dim] + (c0[dim] + i,) + c0[dim + 1:]
                    if tuple(layout.global_index(t, base + i)) != want:
                        ok = False
        if ok:
            return w
        w //= 2
    return 1


@given(pow2_layouts())
def test_vector_width_matches_brute_force(layout):
    for dim in range(layout.ndim):
        w = vector_width(layout, dim)
        assert w == _brute_vector_width(layout, dim)
        assert w == 1 << contiguous_local_bits(layout, dim)
    assert vector_width(layout) == vector_width(layout, layout.ndim - 1)


def test_vector_width_examples():
    assert vector_width(local(2, 8)) == 8
    assert vector_width(local(2, 8), 0) == 1
    assert vector_width(column_local(2, 8), 0) == 2
    assert vector_width(spatial(4, 4) * local(1, 4)) == 4
    assert vector_width(mma_m16n8k16_a()) == 2
    assert vector_width(mma_m16n8k32_a()) == 4
    assert vector_width(ldmatrix(4)) == 2
    assert vector_width(ldmatrix(4, trans=True)) == 1
    assert vector_width(ldmatrix(4, trans=True), 0) == 2


@given(pow2_layouts(ndim=2))
def test_vector_width_of_a_product_with_a_vector(layout):
    # Appending local(1, 4) makes each thread's last-dim runs at least 4 long.
    assert vector_width(layout * local(1, 4)) >= 4
