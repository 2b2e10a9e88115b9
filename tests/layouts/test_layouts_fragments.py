"""Fragment layouts against the PTX ISA's formulas, element by element.

The golden functions below transcribe the ISA text ("Matrix Fragments for
mma.m16n8k16 with floating point type", "... for mma.m16n8k32", and "Warp-level
matrix load instruction: ldmatrix") independently of the layout algebra: each takes
(lane, i) and returns (row, col) of fragment element i held by that lane.
"""

from __future__ import annotations

import functools
import math

import pytest

from tilevm.layouts.errors import LayoutError
from tilevm.layouts.fragments import (
    ldmatrix,
    mma_m16n8k16_a,
    mma_m16n8k16_b,
    mma_m16n8k16_c,
    mma_m16n8k32_a,
    mma_m16n8k32_b,
    mma_m16n8k32_c,
)


def _ids(lane: int) -> tuple[int, int]:
    return lane >> 2, lane % 4  # groupID, threadID_in_group


def isa_m16n8k16_a(lane: int, i: int) -> tuple[int, int]:
    g, t = _ids(lane)
    row = g if (0 <= i < 2 or 4 <= i < 6) else g + 8
    col = t * 2 + (i & 0x1) if i < 4 else t * 2 + (i & 0x1) + 8
    return row, col


def isa_m16n8k16_b(lane: int, i: int) -> tuple[int, int]:
    g, t = _ids(lane)
    row = t * 2 + (i & 0x1) if i < 2 else t * 2 + (i & 0x1) + 8
    return row, g


def isa_m16n8k16_c(lane: int, i: int) -> tuple[int, int]:
    g, t = _ids(lane)
    row = g if i < 2 else g + 8
    return row, t * 2 + (i & 0x1)


def isa_m16n8k32_a_8bit(lane: int, i: int) -> tuple[int, int]:
    g, t = _ids(lane)
    row = g if (0 <= i < 4 or 8 <= i < 12) else g + 8
    col = t * 4 + (i & 0x3) if i < 8 else t * 4 + (i & 0x3) + 16
    return row, col


def isa_m16n8k32_b_8bit(lane: int, i: int) -> tuple[int, int]:
    g, t = _ids(lane)
    row = t * 4 + (i & 0x3) if i < 4 else t * 4 + (i & 0x3) + 16
    return row, g


def isa_ldmatrix(num: int, trans: bool, lane: int, i: int) -> tuple[int, int]:
    # Register r of every lane holds a fragment of matrix r, whose rows come from the
    # addresses of lanes 8r..8r+7, i.e. rows 8r..8r+7 of the stacked tile. Within an 8x8
    # matrix of b16, lane l gets two consecutive elements of row l // 4 starting at column
    # 2 * (l % 4); .trans delivers the matrix column-major (transposed).
    reg, half = divmod(i, 2)
    r, c = lane // 4, 2 * (lane % 4) + half
    if trans:
        r, c = c, r
    return 8 * reg + r, c


CASES = [
    (mma_m16n8k16_a, isa_m16n8k16_a, (16, 16), 8),
    (mma_m16n8k16_b, isa_m16n8k16_b, (16, 8), 4),
    (mma_m16n8k16_c, isa_m16n8k16_c, (16, 8), 4),
    (mma_m16n8k32_a, isa_m16n8k32_a_8bit, (16, 32), 16),
    (mma_m16n8k32_b, isa_m16n8k32_b_8bit, (32, 8), 8),
    (mma_m16n8k32_c, isa_m16n8k16_c, (16, 8), 4),
]


@pytest.mark.parametrize(("make", "golden", "shape", "per_thread"), CASES,
                         ids=[c[0].__name__ for c in CASES])
def test_mma_fragments_match_the_isa(make, golden, shape, per_thread):
    layout = make()
    assert tuple(layout.shape) == shape
    assert layout.num_threads == 32
    assert layout.local_size == per_thread
    for lane in range(32):
        for i in range(per_thread):
            assert tuple(layout.global_index(lane, i)) == golden(lane, i), (lane, i)


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_matches_the_isa(num, trans):
    layout = ldmatrix(num, trans)
    assert tuple(layout.shape) == (8 * num, 8)
    assert layout.num_threads == 32
    assert layout.local_size == 2 * num
    for lane in range(32):
        for i in range(2 * num):
            assert tuple(layout.global_index(lane, i)) == isa_ldmatrix(num, trans, lane, i)


ALL = [make for make, *_ in CASES] + [
    functools.partial(ldmatrix, n, t) for n in (1, 2, 4) for t in (False, True)]
ALL_IDS = [make.__name__ for make, *_ in CASES] + [
    f"ldmatrix_x{n}{'_trans' if t else ''}" for n in (1, 2, 4) for t in (False, True)]


@pytest.mark.parametrize("make", ALL, ids=ALL_IDS)
def test_every_element_has_exactly_one_owner(make):
    layout = make()
    assert layout.num_threads * layout.local_size == math.prod(layout.shape)
    seen = set()
    for lane in range(layout.num_threads):
        for i in range(layout.local_size):
            coord = tuple(layout.global_index(lane, i))
            assert coord not in seen
            seen.add(coord)
            assert list(layout.owners(coord)) == [(lane, i)]
            assert layout.local_index(coord) == i


def test_ldmatrix_x4_loads_the_mma_a_fragment():
    # With lanes 8m..8m+7 pointing at the rows of block m = (rows 8*(m%2), cols 8*(m//2)),
    # register m of ldmatrix.x4 holds a_{2m}, a_{2m+1}: the element each lane gets is the
    # A-fragment element of the same (lane, register half).
    a, ld = mma_m16n8k16_a(), ldmatrix(4)
    for lane in range(32):
        for i in range(8):
            r, c = ld.global_index(lane, i)
            m, r = divmod(r, 8)
            assert tuple(a.global_index(lane, i)) == (r + 8 * (m % 2), c + 8 * (m // 2))


def test_ldmatrix_x2_trans_is_the_mma_b_fragment():
    b, ld = mma_m16n8k16_b(), ldmatrix(2, trans=True)
    for lane in range(32):
        for i in range(4):
            assert tuple(ld.global_index(lane, i)) == tuple(b.global_index(lane, i))
    assert ld == b


def test_ldmatrix_x2_is_the_mma_c_fragment():
    # Two stacked 8x8 matrices of b16 are delivered exactly like the C/D fragment.
    assert ldmatrix(2) == mma_m16n8k16_c()


def test_ldmatrix_rejects_other_counts():
    with pytest.raises(LayoutError):
        ldmatrix(3)
