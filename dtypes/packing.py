"""Dense bit packing of b-bit codes, 1 <= b <= 8.

Element `i` of a b-bit array occupies bits `[i*b, (i+1)*b)` of a little-endian
bitstream: bit `k` of the stream is bit `k % 8` of byte `k // 8`, and an element's
least significant bit comes first. An element may straddle a byte boundary. The
last byte is zero-padded; `len(pack(codes, b)) == ceil(len(codes) * b / 8)`.

Both directions work on groups of 8 elements, which fill exactly `b` bytes: a
group is assembled in (or read from) one little-endian uint64 with shifts, so the
whole array is processed by a handful of vectorized numpy operations, for every b.
"""

from __future__ import annotations

import numpy as np

from tilevm.dtypes.datatype import DTypeError

_GROUP = 8  # elements per group; a group of b-bit elements is exactly b bytes


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_bits(bits: int) -> int:
    if not _is_int(bits) or not 1 <= bits <= 8:
        raise DTypeError(f"bits (the bit width) must be an integer in 1..8, got {bits!r}")
    return int(bits)


def _check_count(count: int) -> int:
    if not _is_int(count) or count < 0:
        raise DTypeError(f"count must be a non-negative integer, got {count!r}")
    return int(count)


def packed_size(count: int, bits: int) -> int:
    """Bytes holding `count` packed elements of `bits` bits. A `DTypeError` (a
    `ValueError`) for a count that is not a non-negative integer or bits outside 1..8."""
    return (_check_count(count) * _check_bits(bits) + 7) // 8


def pack(codes: np.ndarray | list, bits: int) -> np.ndarray:
    """Pack a 1-D array of codes (each < 2**bits) into a uint8 byte array."""
    bits = _check_bits(bits)
    c = np.asarray(codes)
    if c.ndim != 1:
        raise DTypeError(f"pack expects a 1-D array of codes, got shape {c.shape}")
    if c.dtype.kind not in "iu" and c.size:  # `[]` is float64 to numpy, and packs fine
        raise DTypeError(f"codes must be integers, got numpy dtype {c.dtype}")
    if c.size and (c.min() < 0 or c.max() >= (1 << bits)):
        bad = c[(c < 0) | (c >= (1 << bits))][0]
        raise DTypeError(f"code {int(bad)} does not fit in {bits} bits")
    n = c.size
    groups = -(-n // _GROUP)
    padded = np.zeros(groups * _GROUP, dtype=np.uint64)
    padded[:n] = c
    columns = padded.reshape(groups, _GROUP)
    words = columns[:, 0].copy()
    for j in range(1, _GROUP):
        words |= columns[:, j] << np.uint64(j * bits)
    group_bytes = words.astype("<u8").view(np.uint8).reshape(groups, 8)[:, :bits]
    return np.ascontiguousarray(group_bytes).reshape(-1)[: packed_size(n, bits)]


def unpack(data: np.ndarray | bytes, bits: int, count: int) -> np.ndarray:
    """The first `count` b-bit codes of a packed byte array, as uint8."""
    bits = _check_bits(bits)
    raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray)) \
        else np.asarray(data)
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise DTypeError(f"packed data must be a 1-D uint8 array, got {raw.dtype} {raw.shape}")
    count = _check_count(count)
    need = packed_size(count, bits)
    if raw.size < need:
        raise DTypeError(f"{count} elements of {bits} bits need {need} bytes, got {raw.size}")
    groups = -(-count // _GROUP)
    padded = np.zeros((groups, 8), dtype=np.uint8)
    stream = np.zeros(groups * bits, dtype=np.uint8)
    stream[:need] = raw[:need]
    padded[:, :bits] = stream.reshape(groups, bits)
    words = padded.view("<u8").reshape(groups, 1)
    shifts = np.arange(_GROUP, dtype=np.uint64) * np.uint64(bits)
    codes = (words >> shifts) & np.uint64((1 << bits) - 1)
    return codes.reshape(-1)[:count].astype(np.uint8)
