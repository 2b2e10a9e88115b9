"""Where a thread's elements sit in its 32-bit registers, for any element width.

A thread holds its `local_size` elements of a b-bit type densely packed in an array
of 32-bit registers, with the same convention as `tilevm.dtypes.pack` on bytes:
element `l` occupies bits `[l*b, (l+1)*b)` of the thread's register bit array,
register `w` holds bits `[32*w, 32*(w+1))`, and an element's least significant bit
comes first. Widths that do not divide 32 (3, 5, 6, 7 bits) make some elements
straddle two registers; `bit_slot` reports both pieces so that codegen can emit the
two shifts and the OR.

The `view` instruction reinterprets the bits a thread holds as another dtype and
layout without moving data between threads, so it is legal exactly when both sides
hold the same number of threads and the same number of bits per thread.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilevm.layouts.errors import LayoutError
from tilevm.layouts.register_layout import RegisterLayout

WORD_BITS = 32  # width of a general-purpose register


def _check_bits(bits: int) -> int:
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 1 <= bits <= 64:
        raise LayoutError(f"element width must be an integer number of bits in 1..64, "
                          f"got {bits!r}")
    return int(bits)


# ---- views ------------------------------------------------------------------------------
def bits_per_thread(layout: RegisterLayout, bits: int) -> int:
    """Bits each thread holds for a tile of `bits`-bit elements in `layout`."""
    return layout.local_size * _check_bits(bits)


def registers_per_thread(layout: RegisterLayout, bits: int) -> int:
    """32-bit registers each thread needs to hold its elements densely packed."""
    return -(-bits_per_thread(layout, bits) // WORD_BITS)


def view_is_legal(layout_a: RegisterLayout, bits_a: int,
                  layout_b: RegisterLayout, bits_b: int) -> bool:
    """True iff reinterpreting (layout_a, bits_a) as (layout_b, bits_b) keeps every bit
    in its thread: equal thread counts and equal bits per thread."""
    return (layout_a.num_threads == layout_b.num_threads
            and bits_per_thread(layout_a, bits_a) == bits_per_thread(layout_b, bits_b))


def check_view(layout_a: RegisterLayout, bits_a: int,
               layout_b: RegisterLayout, bits_b: int) -> None:
    """Raise LayoutError, saying which condition fails, unless `view_is_legal`."""
    if layout_a.num_threads != layout_b.num_threads:
        raise LayoutError(f"illegal view: the source is spread over {layout_a.num_threads} "
                          f"threads, the target over {layout_b.num_threads}")
    have = bits_per_thread(layout_a, bits_a)
    want = bits_per_thread(layout_b, bits_b)
    if have != want:
        raise LayoutError(
            f"illegal view: each thread holds {layout_a.local_size} x {bits_a} = {have} bits, "
            f"the target needs {layout_b.local_size} x {bits_b} = {want} bits per thread")


# ---- bit slots --------------------------------------------------------------------------
@dataclass(frozen=True)
class BitPiece:
    """Bits `[bit_offset, bit_offset + width)` of register `word` hold bits
    `[value_shift, value_shift + width)` of the element."""

    word: int
    bit_offset: int
    width: int
    value_shift: int


@dataclass(frozen=True)
class BitSlot:
    """The location of local element `local` of width `bits` in a thread's registers:
    bits `[local*bits, (local+1)*bits)` of the register bit array, as one piece per
    register it touches (low piece first)."""

    local: int
    bits: int
    pieces: tuple[BitPiece, ...]

    @property
    def word(self) -> int:
        """The register holding the element's least significant bit."""
        return self.pieces[0].word

    @property
    def bit_offset(self) -> int:
        """Position of the element's least significant bit in register `word`."""
        return self.pieces[0].bit_offset

    @property
    def spans(self) -> bool:
        """Whether the element straddles a register boundary."""
        return len(self.pieces) > 1

    @property
    def start(self) -> int:
        """First bit in the thread's register bit array."""
        return self.local * self.bits


def bit_slot(local: int, bits: int) -> BitSlot:
    """Where element `local` of `bits`-bit elements lives in the thread's registers."""
    bits = _check_bits(bits)
    if isinstance(local, bool) or not isinstance(local, (int, np.integer)) or local < 0:
        raise LayoutError(f"local index must be a non-negative integer, got {local!r}")
    pos = int(local) * bits
    end = pos + bits
    pieces = []
    while pos < end:
        word, off = divmod(pos, WORD_BITS)
        width = min(WORD_BITS - off, end - pos)
        pieces.append(BitPiece(word, off, width, pos - int(local) * bits))
        pos += width
    return BitSlot(int(local), bits, tuple(pieces))


def read_slot(words: np.ndarray, slot: BitSlot) -> int:
    """The element `slot` describes, read from a thread's uint32 registers."""
    value = 0
    for p in slot.pieces:
        field = (int(words[p.word]) >> p.bit_offset) & ((1 << p.width) - 1)
        value |= field << p.value_shift
    return value


def pack_registers(codes: np.ndarray | list, bits: int) -> np.ndarray:
    """A thread's `bits`-bit codes packed into its uint32 registers (unused bits zero)."""
    bits = _check_bits(bits)
    codes = [int(c) for c in np.asarray(codes).reshape(-1)]
    words = [0] * (-(-len(codes) * bits // WORD_BITS))
    for local, code in enumerate(codes):
        if not 0 <= code < (1 << bits):
            raise LayoutError(f"code {code} does not fit in {bits} bits")
        for p in bit_slot(local, bits).pieces:
            words[p.word] |= ((code >> p.value_shift) & ((1 << p.width) - 1)) << p.bit_offset
    return np.array(words, dtype=np.uint32)


def unpack_registers(words: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first `count` `bits`-bit codes held in a thread's uint32 registers (uint64)."""
    bits = _check_bits(bits)
    words = np.asarray(words, dtype=np.uint32).reshape(-1)
    if count * bits > words.size * WORD_BITS:
        raise LayoutError(f"{count} elements of {bits} bits need {count * bits} bits, "
                          f"the registers hold {words.size * WORD_BITS}")
    return np.array([read_slot(words, bit_slot(i, bits)) for i in range(count)],
                    dtype=np.uint64)


def reinterpret(codes: np.ndarray | list, from_bits: int, to_bits: int) -> np.ndarray:
    """A thread's elements viewed at another width: the same bits, regrouped.

    `len(codes) * from_bits` must be a multiple of `to_bits` (the view keeps the number
    of bits per thread). Returns the `to_bits`-bit codes as uint64.
    """
    from_bits, to_bits = _check_bits(from_bits), _check_bits(to_bits)
    n = np.asarray(codes).size
    total = n * from_bits
    if total % to_bits:
        raise LayoutError(f"{n} elements of {from_bits} bits ({total} bits) cannot be "
                          f"viewed as {to_bits}-bit elements")
    return unpack_registers(pack_registers(codes, from_bits), to_bits, total // to_bits)
