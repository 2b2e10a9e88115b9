"""Which register tiles are held packed: elements of 8 bits or fewer live as the i32
words of each thread's bit string (pass `lower_bit_packing` records how each `view` and
`cast` moves those bits; backend/llvm emits them)."""

from __future__ import annotations

from tilevm.dtypes import DataType

PACKED_BITS = 8  # elements of at most this many bits are held packed


def is_packed(dtype: DataType) -> bool:
    """Whether register tiles of `dtype` are held as packed i32 words."""
    return dtype.bits <= PACKED_BITS
