"""Sub-byte register bits: view legality, bit slots (straddling included), round trips."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tilevm import dtypes
from tilevm.layouts.errors import LayoutError
from tilevm.layouts.register_bits import (
    BitPiece,
    bit_slot,
    bits_per_thread,
    check_view,
    pack_registers,
    read_slot,
    registers_per_thread,
    reinterpret,
    unpack_registers,
    view_is_legal,
)
from tilevm.layouts.register_layout import column_local, column_spatial, local, spatial

WIDTHS = [*range(1, 9), 16, 32]
PRIMITIVES = [local, spatial, column_local, column_spatial]


@st.composite
def layouts(draw: st.DrawFn):
    """Products of 1..3 random primitives over two dims of extent 1..4 each."""
    result = None
    for _ in range(draw(st.integers(1, 3))):
        prim = draw(st.sampled_from(PRIMITIVES))
        part = prim(draw(st.integers(1, 4)), draw(st.integers(1, 4)))
        result = part if result is None else result * part
    return result


def _codes(draw: st.DrawFn, count: int, bits: int) -> np.ndarray:
    return np.array(draw(st.lists(st.integers(0, (1 << bits) - 1), min_size=count,
                                  max_size=count)), dtype=np.uint64)


# ---- views ------------------------------------------------------------------------------
@given(layouts(), st.sampled_from(WIDTHS), layouts(), st.sampled_from(WIDTHS))
def test_view_legal_iff_bits_per_thread_preserved(a, bits_a, b, bits_b):
    same = (a.num_threads == b.num_threads
            and a.local_size * bits_a == b.local_size * bits_b)
    assert view_is_legal(a, bits_a, b, bits_b) == same
    assert view_is_legal(b, bits_b, a, bits_a) == same  # symmetric
    if same:
        check_view(a, bits_a, b, bits_b)
    else:
        with pytest.raises(LayoutError, match="illegal view"):
            check_view(a, bits_a, b, bits_b)


@given(layouts(), st.sampled_from(WIDTHS))
def test_view_to_an_equal_bit_budget_is_legal(a, bits):
    # Halving the width and doubling the locals per thread keeps every bit in place.
    b = a * local(1, 2)
    if bits % 2 == 0:
        assert view_is_legal(a, bits, b, bits // 2)
    assert not view_is_legal(a, bits, b, bits)
    assert bits_per_thread(b, bits) == 2 * bits_per_thread(a, bits)


def test_view_messages_name_the_failing_condition():
    a = spatial(8, 4) * local(1, 2)  # 32 threads x 2 locals
    with pytest.raises(LayoutError, match="threads"):
        check_view(a, 16, spatial(4, 4) * local(1, 4), 16)
    with pytest.raises(LayoutError, match="2 x 16 = 32 bits"):
        check_view(a, 16, spatial(8, 4) * local(1, 8), 16)
    check_view(a, 16, spatial(8, 4) * local(1, 8), 4)  # 32 bits = 8 x 4 bits


def test_registers_per_thread_rounds_up():
    assert registers_per_thread(local(8), 4) == 1
    assert registers_per_thread(local(11), 3) == 2  # 33 bits
    assert registers_per_thread(local(16), 6) == 3  # 96 bits
    assert registers_per_thread(local(1), 1) == 1


# ---- bit slots --------------------------------------------------------------------------
@given(st.integers(0, 300), st.sampled_from([*WIDTHS, 64]))
def test_bit_slot_is_exactly_l_times_b(l, bits):
    slot = bit_slot(l, bits)
    assert slot.start == l * bits
    # The pieces tile [l*b, (l+1)*b) in order, each inside one register.
    pos, shift = l * bits, 0
    for p in slot.pieces:
        assert p.word * 32 + p.bit_offset == pos
        assert p.value_shift == shift
        assert 1 <= p.width and p.bit_offset + p.width <= 32
        pos += p.width
        shift += p.width
    assert pos == (l + 1) * bits
    assert (slot.word, slot.bit_offset) == divmod(l * bits, 32)
    assert slot.spans == ((l * bits) // 32 != ((l + 1) * bits - 1) // 32)


@pytest.mark.parametrize(("l", "bits", "pieces"), [
    (10, 3, (BitPiece(0, 30, 2, 0), BitPiece(1, 0, 1, 2))),   # bits 30..32
    (6, 5, (BitPiece(0, 30, 2, 0), BitPiece(1, 0, 3, 2))),    # bits 30..34
    (5, 6, (BitPiece(0, 30, 2, 0), BitPiece(1, 0, 4, 2))),    # bits 30..35
    (21, 3, (BitPiece(1, 31, 1, 0), BitPiece(2, 0, 2, 1))),   # bits 63..65
    (7, 4, (BitPiece(0, 28, 4, 0),)),                         # 4 bits never straddle
    (1, 16, (BitPiece(0, 16, 16, 0),)),
])
def test_straddling_slots(l, bits, pieces):
    slot = bit_slot(l, bits)
    assert slot.pieces == pieces
    assert slot.spans == (len(pieces) == 2)


@given(st.data(), st.integers(1, 8), st.integers(0, 80))
def test_slots_read_back_dtypes_pack(data, bits, count):
    # dtypes.pack writes the little-endian bitstream; its bytes, read as little-endian
    # 32-bit words, are the thread's registers. Every slot must read its code back.
    codes = _codes(data.draw, count, bits)
    stream = dtypes.pack(codes, bits)
    padded = np.zeros(-(-stream.size // 4) * 4, dtype=np.uint8)
    padded[:stream.size] = stream
    words = padded.view("<u4")
    got = [read_slot(words, bit_slot(i, bits)) for i in range(count)]
    assert got == [int(c) for c in codes]
    # ... and packing through the slots gives the same registers.
    np.testing.assert_array_equal(pack_registers(codes, bits), words)


@given(st.data(), st.sampled_from([*WIDTHS, 64]), st.integers(0, 40))
def test_pack_unpack_registers_round_trip(data, bits, count):
    codes = _codes(data.draw, count, bits)
    words = pack_registers(codes, bits)
    assert words.size == -(-count * bits // 32)
    np.testing.assert_array_equal(unpack_registers(words, bits, count), codes)


@given(st.data(), st.sampled_from(WIDTHS), st.sampled_from(WIDTHS), st.integers(0, 4))
def test_view_round_trip_b1_to_b2_and_back(data, b1, b2, groups):
    # A count whose bits regroup exactly: a multiple of lcm(b1, b2) / b1.
    count = groups * (np.lcm(b1, b2) // b1)
    codes = _codes(data.draw, int(count), b1)
    viewed = reinterpret(codes, b1, b2)
    assert viewed.size * b2 == codes.size * b1
    assert int(viewed.max(initial=0)) < (1 << b2)
    np.testing.assert_array_equal(reinterpret(viewed, b2, b1), codes)


@given(st.data(), st.integers(1, 8))
def test_view_as_bytes_is_dtypes_pack(data, bits):
    codes = _codes(data.draw, 8 * data.draw(st.integers(0, 5)), bits)
    np.testing.assert_array_equal(reinterpret(codes, bits, 8), dtypes.pack(codes, bits))


def test_bad_arguments():
    with pytest.raises(LayoutError):
        bit_slot(-1, 4)
    with pytest.raises(LayoutError):
        bit_slot(0, 0)
    with pytest.raises(LayoutError, match="cannot be viewed"):
        reinterpret([1, 2, 3], 3, 2)
    with pytest.raises(LayoutError, match="does not fit"):
        pack_registers([8], 3)
    with pytest.raises(LayoutError, match="need"):
        unpack_registers(np.zeros(1, np.uint32), 5, 7)
