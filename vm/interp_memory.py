"""Memory of the reference interpreter (helpers of its `vm/interp_exec_*` semantics):
bit-exact reads and writes of b-bit codes in byte arrays, and shared-memory
allocations with the state the race checker keeps.

Bit addressing: bit `k` of a byte array is bit `k % 8` of byte `k // 8`; a b-bit code
at bit address `p` occupies bits `[p, p + b)`, least significant bit first (the
convention of `dtypes.pack` and of shared layouts' `offset_bits`). An element may
straddle bytes.
"""

from __future__ import annotations

import math

import numpy as np

from tilevm.ir.types import Tensor

# Race-tracker thread ids: >= 0 a thread; UNKNOWN a writer or reader the layout does not
# name (no layout given, or a copy_async, which the whole block issues).
UNKNOWN = -2
NONE = -1


def read_codes(mem: np.ndarray, bitpos: np.ndarray, bits: int) -> np.ndarray:
    """The `bits`-bit codes at bit addresses `bitpos` of the uint8 array `mem`, as uint64.
    The caller guarantees `[p, p + bits)` lies inside `mem`."""
    bitpos = np.asarray(bitpos, dtype=np.int64)
    if bitpos.size == 0:
        return np.zeros(bitpos.shape, dtype=np.uint64)
    byte0 = bitpos >> 3
    shift = (bitpos & 7).astype(np.uint64)
    aligned = bits % 8 == 0 and not shift.any()
    nbytes = bits // 8 if aligned else (7 + bits + 7) // 8
    word = np.zeros(bitpos.shape, dtype=np.uint64)
    last = mem.size - 1
    for i in range(nbytes):
        idx = byte0 + i
        # bytes past the end only ever hold bits above the element; they are masked off
        byte = mem[np.minimum(idx, last)].astype(np.uint64)
        byte = np.where(idx <= last, byte, np.uint64(0))
        word |= byte << np.uint64(8 * i)
    return (word >> shift) & np.uint64((1 << bits) - 1)


def write_codes(mem: np.ndarray, bitpos: np.ndarray, codes: np.ndarray, bits: int) -> None:
    """Write `bits`-bit `codes` at bit addresses `bitpos` of the uint8 array `mem`, leaving
    every other bit as it was. Where two elements share an address, the later one (in
    row-major order of the arrays) wins."""
    bitpos = np.asarray(bitpos, dtype=np.int64).reshape(-1)
    codes = np.asarray(codes, dtype=np.uint64).reshape(-1)
    if bitpos.size == 0:
        return
    # keep the last write to each address (increasing addresses are all distinct)
    rev_unique = None if (np.diff(bitpos) > 0).all() else \
        np.unique(bitpos[::-1], return_index=True)[1]
    if rev_unique is not None and rev_unique.size != bitpos.size:
        keep = bitpos.size - 1 - rev_unique
        bitpos, codes = bitpos[keep], codes[keep]
    byte0 = bitpos >> 3
    shift = (bitpos & 7).astype(np.uint64)
    if bits % 8 == 0 and not shift.any():
        for i in range(bits // 8):
            mem[byte0 + i] = ((codes >> np.uint64(8 * i)) & np.uint64(0xFF)).astype(np.uint8)
        return
    value = codes << shift
    mask = np.uint64((1 << bits) - 1) << shift
    for i in range((7 + bits + 7) // 8):
        m = ((mask >> np.uint64(8 * i)) & np.uint64(0xFF)).astype(np.uint8)
        v = ((value >> np.uint64(8 * i)) & np.uint64(0xFF)).astype(np.uint8)
        sel = m != 0
        if not sel.any():
            continue
        idx = byte0[sel] + i
        np.bitwise_and.at(mem, idx, ~m[sel])
        np.bitwise_or.at(mem, idx, v[sel])


class SharedAlloc:
    """One live (or freed) shared-memory allocation of a block.

    `mem` holds `layout.size_bytes` bytes; element `c` sits at bit `offset_bits[c]`.
    For race checking the bytes are tracked in *units* of `gcd(element_bits, 8)` bits
    (a byte for 8/16/32-bit elements, a nibble for 4-bit ones, a bit for 3-bit ones):
    the finest granularity at which two elements of this allocation can be told apart,
    so threads that own different elements packed into one byte do not conflict.

    Per unit, since the last `sync` (an *epoch*): the writers (`w_tmin`/`w_tmax`: the
    smallest and largest writer thread, UNKNOWN when not known; a single writer iff
    both are equal and >= 0), the site of the last write and the element of the written
    tile that covered the unit (to tell whether a reader is one of several replicated
    writers); the same for readers (but the element); the
    async copy (`inflight`: a record index, or NONE) still writing it; and whether it
    was ever written (`init`).
    """

    def __init__(self, tensor: Tensor, layout, site: int) -> None:
        self.tensor = tensor
        self.layout = layout
        self.bits = tensor.dtype.bits
        self.alloc_site = site
        self.freed_site: int | None = None
        self.mem = np.zeros(layout.size_bytes, dtype=np.uint8)
        self.offset_bits = layout.all_offset_bits().astype(np.int64)
        self.unit = math.gcd(self.bits, 8)
        self.units_per_element = self.bits // self.unit
        n = self.mem.size * 8 // self.unit
        self.init = np.zeros(n, dtype=bool)
        self.w_epoch = np.full(n, -1, dtype=np.int64)
        self.w_tmin = np.full(n, NONE, dtype=np.int64)
        self.w_tmax = np.full(n, NONE, dtype=np.int64)
        self.w_site = np.full(n, -1, dtype=np.int64)
        self.w_elem = np.zeros(n, dtype=np.int64)  # the writing tile's element of each unit
        self.r_epoch = np.full(n, -1, dtype=np.int64)
        self.r_tmin = np.full(n, NONE, dtype=np.int64)
        self.r_tmax = np.full(n, NONE, dtype=np.int64)
        self.r_site = np.full(n, -1, dtype=np.int64)
        self.inflight = np.full(n, NONE, dtype=np.int64)
        # In a program in clusters (`interp_cluster`), made on first use: per unit, the
        # cluster phase of the last write, and of the last read by a peer and its site.
        self.w_phase: np.ndarray | None = None
        self.peer_r_phase: np.ndarray | None = None
        self.peer_r_site: np.ndarray | None = None

    @property
    def name(self) -> str:
        return str(self.tensor)

    def units(self, bitpos: np.ndarray) -> np.ndarray:
        """The tracked units of the elements at bit addresses `bitpos` (shape [..., k])."""
        first = np.asarray(bitpos, dtype=np.int64)[..., None] // self.unit
        return first + np.arange(self.units_per_element, dtype=np.int64)


def combine(units: np.ndarray, threads: np.ndarray, n: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct units among `units` with the smallest and largest thread of each
    (UNKNOWN is the smallest possible, so it marks the unit as not single-threaded)."""
    tmin = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    seen = np.zeros(n, dtype=bool)
    seen[units] = True
    touched = np.flatnonzero(seen)
    if touched.size == units.size:  # every unit once: no reduction needed
        tmin[units] = threads
        return touched, tmin[touched], tmin[touched]
    tmax = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(tmin, units, threads)
    np.maximum.at(tmax, units, threads)
    return touched, tmin[touched], tmax[touched]
