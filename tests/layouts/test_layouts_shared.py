"""Shared layouts and byte swizzles, checked against brute-force oracles.

Oracles are written here independently of the code under test: the swizzle bit by
bit from its definition, offsets from the strided formula, bank groups and
wavefronts from byte addresses by simulation, and conflict counts of unswizzled
tiles from a gcd formula.
"""

from __future__ import annotations

import itertools
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tilevm import dtypes
from tilevm.layouts.errors import LayoutError
from tilevm.layouts.expression import parse_layout
from tilevm.layouts.shared_layout import (
    SharedLayout,
    bank_conflicts,
    column_major,
    ldmatrix_conflict_free,
    ldmatrix_phase_bank_groups,
    ldmatrix_phase_coords,
    row_major,
    swizzled,
    wavefronts,
    wavefronts_for_bytes,
)
from tilevm.layouts.swizzle import Swizzle

# ---- oracles -----------------------------------------------------------------------------


def swizzle_oracle(addr: int, bits: int, base: int, shift: int) -> int:
    """The definition, one bit at a time: bit base+shift+i flips bit base+i."""
    out = addr
    for i in range(bits):
        if (addr >> (base + shift + i)) & 1:
            out ^= 1 << (base + i)
    return out


def offset_bits_oracle(layout: SharedLayout, coord: tuple[int, ...]) -> int:
    linear = sum(c * s for c, s in zip(coord, layout.strides, strict=True)) * layout.element_bits
    sw = layout.swizzle
    byte = linear // 8 if sw is None else swizzle_oracle(linear // 8, sw.bits, sw.base, sw.shift)
    return byte * 8 + linear % 8


def wavefront_simulation(byte_ranges: list[tuple[int, int]]) -> int:
    """Serve the requests wavefront by wavefront: one pending word per bank each time."""
    pending = {w for start, n in byte_ranges for w in range(start // 4, (start + n - 1) // 4 + 1)}
    count = 0
    while pending:
        served = {}
        for w in sorted(pending):
            served.setdefault(w % 32, w)
        pending -= set(served.values())
        count += 1
    return count


def coords_of(shape: tuple[int, ...]):
    return itertools.product(*(range(n) for n in shape))


# ---- strategies (every value is valid by construction) -----------------------------------

POW2_BITS = (1, 2, 4, 8, 16, 32)


@st.composite
def swizzles(draw, max_bits: int = 3, min_base: int = 0, max_base: int = 5) -> Swizzle:
    bits = draw(st.integers(0, max_bits))
    base = draw(st.integers(min_base, max(min_base, max_base)))
    shift = draw(st.integers(bits, bits + 4))
    return Swizzle(bits, base, shift)


def min_base_for(element_bits: int) -> int:
    """Smallest swizzle base whose unit (8 * 2**base bits) the element width divides."""
    return max(0, element_bits.bit_length() - 1 - 3)


@st.composite
def shared_layouts(draw) -> SharedLayout:
    swizzled_kind = draw(st.booleans())
    if swizzled_kind:
        bits = draw(st.sampled_from(POW2_BITS))
        swizzle = draw(swizzles(min_base=min_base_for(bits), max_base=6))
    else:
        bits = draw(st.integers(1, 32))
        swizzle = None
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    strides = tuple(draw(st.lists(st.integers(0, 80), min_size=rank, max_size=rank)))
    return SharedLayout(shape, strides, bits, swizzle)


# ---- Swizzle -----------------------------------------------------------------------------


@given(swizzles(max_bits=4, max_base=8), st.lists(st.integers(0, 1 << 22), min_size=1, max_size=20))
def test_swizzle_matches_its_bitwise_definition(sw, addrs):
    expected = [swizzle_oracle(a, sw.bits, sw.base, sw.shift) for a in addrs]
    assert [sw.apply(a) for a in addrs] == expected
    assert sw.apply(np.array(addrs, dtype=np.int64)).tolist() == expected
    assert sw(addrs[0]) == expected[0]


@given(swizzles(max_bits=4, max_base=8), st.lists(st.integers(0, 1 << 30), min_size=1))
def test_swizzle_is_an_involution(sw, addrs):
    a = np.array(addrs, dtype=np.int64)
    assert np.array_equal(sw.apply(sw.apply(a)), a)
    assert all(sw.apply(sw.apply(x)) == x for x in addrs)


@given(swizzles(), st.integers(0, 5))
def test_swizzle_is_a_bijection_on_every_aligned_block(sw, block):
    period = 1 << (sw.base + sw.shift + sw.bits)
    assert sw.period == period or (sw.bits == 0 and sw.period == 1)
    addrs = np.arange(block * period, (block + 1) * period, dtype=np.int64)
    out = sw.apply(addrs)
    assert np.array_equal(np.sort(out), addrs)  # onto the same block, no collisions
    # Units of 2**base bytes move as a whole: their bytes stay in order.
    unit = 1 << sw.base
    chunks = out.reshape(-1, unit)
    assert np.array_equal(chunks - chunks[:, :1], np.broadcast_to(np.arange(unit), chunks.shape))


def test_swizzle_validation():
    with pytest.raises(LayoutError, match="shift must be >= bits"):
        Swizzle(3, 4, 2)
    with pytest.raises(LayoutError, match=">= 0"):
        Swizzle(-1, 4, 3)
    with pytest.raises(LayoutError, match="must be an int"):
        Swizzle(3.0, 4, 3)
    with pytest.raises(LayoutError, match="beyond"):
        Swizzle(8, 30, 20)
    sw = Swizzle(3, 4, 3)
    with pytest.raises(LayoutError, match=">= 0"):
        sw.apply(-16)
    with pytest.raises(LayoutError, match="integers"):
        sw.apply(np.array([1.0]))
    with pytest.raises(LayoutError, match="int or an integer array"):
        sw.apply("16")
    assert Swizzle.identity().is_identity and Swizzle(0, 4, 2).apply(12345) == 12345
    assert list(sw.target_bits) == [4, 5, 6] and list(sw.source_bits) == [7, 8, 9]


# ---- offsets -----------------------------------------------------------------------------


@given(shared_layouts())
def test_offsets_match_strided_formula_plus_swizzle(layout):
    every = layout.all_offset_bits()
    for coord in coords_of(layout.shape):
        expected = offset_bits_oracle(layout, coord)
        assert layout.offset_bits(coord) == expected
        assert layout.offset_bytes(coord) == expected // 8
        assert every[coord] == expected
    ends = [offset_bits_oracle(layout, c) + layout.element_bits for c in coords_of(layout.shape)]
    assert layout.size_bytes == math.ceil(max(ends) / 8)


@given(shared_layouts())
def test_str_is_a_constructor_call_that_rebuilds_the_layout(layout):
    assert eval(str(layout), {"SharedLayout": SharedLayout, "Swizzle": Swizzle}) == layout
    if layout.swizzle is not None:
        assert eval(str(layout.swizzle), {"Swizzle": Swizzle}) == layout.swizzle


@given(shared_layouts())
def test_swizzled_elements_stay_whole(layout):
    # An element's bits never straddle two swizzle units (they would move apart).
    if layout.swizzle is None:
        return
    unit_bits = 8 * layout.swizzle.unit_bytes
    for coord in coords_of(layout.shape):
        start = layout.offset_bits(coord)
        assert start // unit_bits == (start + layout.element_bits - 1) // unit_bits


@given(st.lists(st.integers(1, 7), min_size=1, max_size=4), st.sampled_from([1, 3, 4, 8, 16]))
def test_row_and_column_major_are_dense(shape, bits):
    shape = tuple(shape)
    n = math.prod(shape)
    rm = row_major(shape, bits).all_offset_bits() // bits
    cm = column_major(shape, bits).all_offset_bits() // bits
    assert np.array_equal(rm, np.arange(n).reshape(shape))
    assert np.array_equal(cm, np.arange(n).reshape(shape, order="F"))
    assert row_major(shape, bits).size_bytes == math.ceil(n * bits / 8)


def test_dtype_arguments():
    assert row_major((4, 4), dtypes.parse("f16")).element_bits == 16
    assert row_major((4, 4), "f4e2m1").element_bits == 4
    assert SharedLayout((2,), (1,), dtypes.parse("int3")).element_bits == 3
    assert SharedLayout((2,), (1,), 16, Swizzle(0, 4, 0)).swizzle is None


# ---- recast ------------------------------------------------------------------------------


@st.composite
def recastable(draw):
    """A 2-D layout with a contiguous last dim, padded rows, and a byte swizzle."""
    coarse = draw(st.sampled_from([8, 16, 32]))
    rows = draw(st.integers(1, 12))
    cols = draw(st.integers(1, 24))
    pad = draw(st.integers(0, 16))
    swizzle = draw(st.one_of(st.none(), swizzles(min_base=min_base_for(coarse), max_base=6)))
    layout = SharedLayout((rows, cols), (cols + pad, 1), coarse, swizzle)
    fine = draw(st.sampled_from([b for b in POW2_BITS if b < coarse]))
    return layout, fine


@given(recastable())
def test_recast_keeps_every_bit(case):
    layout, fine_bits = case
    ratio = layout.element_bits // fine_bits
    fine = layout.recast(fine_bits)
    rows, cols = layout.shape
    assert fine.shape == (rows, cols * ratio)
    for r, c in coords_of(layout.shape):
        start = offset_bits_oracle(layout, (r, c))
        coarse_bytes = set(range(start // 8, (start + layout.element_bits - 1) // 8 + 1))
        fine_bytes = set()
        for i in range(ratio):
            bit = fine.offset_bits((r, c * ratio + i))
            assert bit == start + i * fine_bits
            first = fine.offset_bytes((r, c * ratio + i))
            fine_bytes.update(range(first, (bit + fine_bits - 1) // 8 + 1))
        assert fine_bytes == coarse_bytes
    assert fine.recast(layout.element_bits) == layout  # and back
    assert fine.size_bytes == layout.size_bytes


@given(st.integers(1, 4), st.integers(1, 20), st.sampled_from(["f16", "bf16"]))
def test_recast_swizzled_16_to_8_and_4_bit(row_groups, chunks, name):
    # The ldmatrix swizzle is a function of bytes, so recasting commutes with choosing it.
    rows, cols = 8 * row_groups, 8 * chunks
    f16 = swizzled((rows, cols), name)
    i8, i4 = f16.recast(8), f16.recast(4)
    assert i8 == swizzled((rows, 2 * cols), "int8")
    assert i4 == swizzled((rows, 4 * cols), "uint4")
    b16 = f16.all_offset_bytes()[:, :, None]
    # i8 elements (r, 2c), (r, 2c+1) are bytes b16, b16+1; i4 elements (r, 4c..4c+3) are
    # the low and high nibbles of those two bytes.
    assert np.array_equal(i8.all_offset_bytes().reshape(rows, cols, 2), b16 + [0, 1])
    assert np.array_equal(i4.all_offset_bits().reshape(rows, cols, 4),
                          8 * b16 + [0, 4, 8, 12])
    r, c = rows - 1, cols - 1  # spot-check the scalar accessors against the arrays
    assert [i4.offset_bytes((r, 4 * c + i)) for i in range(4)] == [b16[r, c, 0]] * 2 + [
        b16[r, c, 0] + 1] * 2


def test_recast_errors():
    with pytest.raises(LayoutError, match="not contiguous"):
        column_major((8, 8), "f16").recast(4)
    with pytest.raises(LayoutError, match="not a multiple of 16"):
        row_major((4, 3), 4).recast(16)
    with pytest.raises(LayoutError, match="stride 3 of dimension 0"):
        SharedLayout((4, 4), (3, 1), 4).recast(8)
    with pytest.raises(LayoutError, match="split between two chunks"):
        swizzled((8, 64), "f16").recast(32).with_swizzle(Swizzle(3, 1, 3))
    assert row_major((64, 64), "f16").recast(4) == row_major((64, 256), 4)


# ---- permute -----------------------------------------------------------------------------


@st.composite
def permuted(draw):
    layout = draw(shared_layouts())
    return layout, tuple(draw(st.permutations(range(layout.rank))))


@given(permuted())
def test_permute_keeps_every_element_at_its_bits(case):
    layout, dims = case
    out = layout.permute(dims)
    assert out.shape == tuple(layout.shape[d] for d in dims)
    assert (out.element_bits, out.swizzle) == (layout.element_bits, layout.swizzle)
    for coord in coords_of(out.shape):
        source = [0] * layout.rank
        for i, d in enumerate(dims):
            source[d] = coord[i]
        assert out.offset_bits(coord) == offset_bits_oracle(layout, tuple(source))
    assert np.array_equal(out.all_offset_bits(), np.transpose(layout.all_offset_bits(), dims))
    assert out.size_bytes == layout.size_bytes
    assert out.permute(tuple(np.argsort(dims))) == layout  # and back


def test_permute_of_a_swizzled_tile_is_its_transpose():
    rows = swizzled((64, 64), "f16")  # 128-byte rows, Swizzle(3, 4, 3)
    cols = rows.permute((1, 0))
    assert cols == SharedLayout((64, 64), (1, 64), 16, rows.swizzle)
    assert np.array_equal(cols.all_offset_bytes(), rows.all_offset_bytes().T)
    assert column_major((8, 4), 8).permute((1, 0)) == row_major((4, 8), 8)
    assert parse_layout("swizzled((64, 64), 'f16').permute((1, 0))") == cols  # text syntax


def test_permute_errors():
    layout = row_major((2, 3, 4), "f16")
    for dims in [(0, 1), (0, 1, 1), (0, 1, 3), (0, 1, 2, 3), (-1, 0, 1)]:
        with pytest.raises(LayoutError, match="not a permutation"):
            layout.permute(dims)
    with pytest.raises(LayoutError, match="must hold ints"):
        layout.permute((0, 1.0, 2))


# ---- ldmatrix bank groups ----------------------------------------------------------------

LDMATRIX_DTYPES = ["f16", "bf16", "int8", "f8e4m3", "uint4", "f4e2m1"]


def phase_groups_from_offsets(layout: SharedLayout, group: int, chunk: int) -> list[int]:
    per_chunk = 128 // layout.element_bits
    return [(layout.offset_bytes((8 * group + i, chunk * per_chunk)) // 16) % 8 for i in range(8)]


@given(st.sampled_from(LDMATRIX_DTYPES), st.integers(1, 4), st.integers(1, 40))
def test_swizzled_ldmatrix_phases_hit_8_distinct_bank_groups(name, row_groups, chunks):
    bits = dtypes.parse(name).bits
    per_chunk = 128 // bits
    layout = swizzled((8 * row_groups, chunks * per_chunk), name)
    for g, j in itertools.product(range(row_groups), range(chunks)):
        groups = phase_groups_from_offsets(layout, g, j)
        assert len(set(groups)) == 8, (layout, g, j, groups)
        assert list(ldmatrix_phase_bank_groups(layout, g, j)) == groups
        assert bank_conflicts(layout, [ldmatrix_phase_coords(layout, g, j)], 16) == 0
    # Each row's 16-byte chunks stay contiguous and aligned (what ldmatrix reads).
    chunk_bits = layout.all_offset_bits().reshape(8 * row_groups, chunks, per_chunk)
    assert np.all(chunk_bits[..., 0] % 128 == 0)
    assert np.array_equal(chunk_bits - chunk_bits[..., :1],
                          np.broadcast_to(np.arange(per_chunk) * bits, chunk_bits.shape))
    assert ldmatrix_conflict_free(layout)
    # The swizzle only permutes chunks inside the tile: a bijection onto the same bytes.
    every = layout.all_offset_bits().ravel()
    assert len(set(every.tolist())) == every.size
    assert layout.size_bytes == 8 * row_groups * chunks * 16


@given(st.sampled_from(LDMATRIX_DTYPES), st.integers(1, 3), st.integers(1, 40))
def test_row_major_conflicts_exactly_as_the_gcd_formula_says(name, row_groups, chunks):
    # Unswizzled, 8 rows of C chunks land in 8 / gcd(C, 8) distinct bank groups.
    bits = dtypes.parse(name).bits
    layout = row_major((8 * row_groups, chunks * 128 // bits), name)
    expected = 8 // math.gcd(chunks, 8)
    for g, j in itertools.product(range(row_groups), range(chunks)):
        assert len(set(phase_groups_from_offsets(layout, g, j))) == expected
    assert ldmatrix_conflict_free(layout) == (expected == 8)
    # swizzled() leaves exactly the conflict-free ones alone.
    assert (swizzled(layout.shape, name).swizzle is None) == (expected == 8)


def test_row_major_128_byte_rows_do_conflict():
    layout = row_major((64, 64), "f16")  # 128-byte rows: every row starts in bank 0
    assert phase_groups_from_offsets(layout, 0, 0) == [0] * 8
    assert not ldmatrix_conflict_free(layout)
    phase = ldmatrix_phase_coords(layout, 0, 0)
    assert wavefronts(layout, phase, access_bytes=16) == 8
    assert bank_conflicts(layout, [phase], access_bytes=16) == 7
    fixed = swizzled((64, 64), "f16")
    assert fixed.swizzle is not None
    assert wavefronts(fixed, ldmatrix_phase_coords(fixed, 0, 0), access_bytes=16) == 1


def test_swizzled_without_swizzle_when_not_needed_or_possible():
    assert swizzled((64, 8), "f16").swizzle is None  # 16-byte rows: already distinct
    assert swizzled((64, 24), "f16").swizzle is None  # 48-byte rows: odd chunk count
    assert swizzled((64, 12), "f16").swizzle is None  # 24-byte rows: not 16-byte rows
    assert swizzled((64, 7), 4).swizzle is None  # rows not whole bytes
    assert swizzled((64, 64), 6).swizzle is None  # 6-bit elements split 16-byte chunks
    with pytest.raises(LayoutError, match="rank >= 2"):
        swizzled((64,), "f16")


# ---- wavefronts --------------------------------------------------------------------------


@given(st.lists(st.tuples(st.integers(0, 4096), st.sampled_from([1, 2, 4, 8, 16])),
                min_size=0, max_size=32))
def test_wavefronts_match_simulation(ranges):
    assert wavefronts_for_bytes(ranges) == wavefront_simulation(ranges)


@given(st.lists(st.integers(0, 255), min_size=1, max_size=32), st.sampled_from([1, 2, 4, 8]))
def test_wavefronts_of_layout_accesses(indices, access):
    layout = row_major((256,), "i32")
    coords = [(i,) for i in indices]
    expected = wavefront_simulation([(4 * i, access) for i in indices])
    assert wavefronts(layout, coords, access) == expected
    words = {w for i in indices for w in range(i, (4 * i + access - 1) // 4 + 1)}
    assert bank_conflicts(layout, [coords], access) == expected - math.ceil(len(words) / 32)


def test_wavefront_examples():
    words = row_major((32 * 32,), "i32")
    assert wavefronts(words, [(i,) for i in range(32)]) == 1  # consecutive words
    assert wavefronts(words, [(32 * i,) for i in range(32)]) == 32  # all in bank 0
    assert wavefronts(words, [(5,)] * 32) == 1  # broadcast
    assert bank_conflicts(words, [[(2 * i,) for i in range(32)]]) == 1  # 2-way
    with pytest.raises(LayoutError, match="access_bytes"):
        wavefronts(words, [(0,)], access_bytes=0)


# ---- pictures ----------------------------------------------------------------------------


@given(shared_layouts())
def test_text_picture_shows_offsets_and_banks(layout):
    expected_bytes = [offset_bits_oracle(layout, c) // 8 for c in coords_of(layout.shape)]
    for show, expected in (("byte", expected_bytes),
                           ("bank", [(b // 4) % 32 for b in expected_bytes])):
        lines = layout.to_text(show).splitlines()
        assert len(lines) == math.prod(layout.shape[:-1])
        assert all(len(line.split()) == layout.shape[-1] for line in lines)
        assert [int(v) for line in lines for v in line.split()] == expected


@given(shared_layouts())
def test_svg_picture_is_xml_colored_by_bank(layout):
    root = ET.fromstring(layout.to_svg())
    ns = "{http://www.w3.org/2000/svg}"
    rects, texts = root.findall(f"{ns}rect"), root.findall(f"{ns}text")
    assert len(rects) == len(texts) == math.prod(layout.shape)
    banks = [(offset_bits_oracle(layout, c) // 32) % 32 for c in coords_of(layout.shape)]
    assert [int(t.text) for t in texts] == banks
    fill_of_bank = {}
    for rect, bank in zip(rects, banks, strict=True):
        assert fill_of_bank.setdefault(bank, rect.get("fill")) == rect.get("fill")
    assert len(set(fill_of_bank.values())) == len(fill_of_bank)


def test_text_picture_of_a_swizzled_tile():
    layout = swizzled((8, 64), "f16")
    lines = layout.to_text("bank").splitlines()
    # Row r starts at the bank group r (the 16-byte chunk r of the row moved to column 0).
    assert [int(line.split()[0]) for line in lines] == [4 * r for r in range(8)]
    with pytest.raises(LayoutError, match="show must be"):
        layout.to_text("color")


# ---- errors ------------------------------------------------------------------------------


def test_shared_layout_errors():
    with pytest.raises(LayoutError, match="differ in rank"):
        SharedLayout((4, 4), (1,), 16)
    with pytest.raises(LayoutError, match=">= 1"):
        SharedLayout((4, 0), (1, 1), 16)
    with pytest.raises(LayoutError, match="strides must be >= 0"):
        SharedLayout((4,), (-1,), 16)
    with pytest.raises(LayoutError, match="1..32 bits"):
        SharedLayout((4,), (1,), 64)
    with pytest.raises(LayoutError, match="1..32 bits"):
        row_major((4,), 0)
    with pytest.raises(LayoutError, match="unknown data type"):
        row_major((4,), "f17")
    with pytest.raises(LayoutError, match="split between two chunks"):
        SharedLayout((4,), (1,), 16, Swizzle(3, 0, 3))
    with pytest.raises(LayoutError, match="Swizzle or None"):
        SharedLayout((4,), (1,), 16, (3, 4, 3))
    layout = row_major((4, 8), "f16")
    with pytest.raises(LayoutError, match="outside shape"):
        layout.offset_bytes((4, 0))
    with pytest.raises(LayoutError, match="rank 1"):
        layout.offset_bytes((1,))
    with pytest.raises(LayoutError, match="outside"):
        ldmatrix_phase_coords(row_major((8, 8), "f16"), 1, 0)
    with pytest.raises(LayoutError, match="rank-2"):
        ldmatrix_phase_bank_groups(row_major((2, 8, 8), "f16"), 0, 0)
