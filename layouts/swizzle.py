"""`Swizzle`: an XOR permutation of shared-memory **byte** addresses.

Parameter order: `Swizzle(bits, base, shift)` (the order of CuTe's `Swizzle<B, M, S>`).
With `mask = 2**bits - 1`, a byte address `a` goes to

    apply(a) = a ^ (((a >> (base + shift)) & mask) << base)

that is: the `bits`-bit field of `a` that starts at bit `base + shift` (the *source*)
is XORed into the `bits`-bit field that starts at bit `base` (the *target*). Every
other bit is kept. `base` is the log2 of the unit that moves as a whole: `base = 4`
permutes 16-byte chunks (what ldmatrix and 128-bit accesses read), and the bytes
inside a chunk keep their order.

Why byte addresses and not element indices: a swizzle that names bytes means the
same thing for every element width, so reinterpreting a swizzled f16 tile as 4-bit
codes (`SharedLayout.recast`) leaves every element's bytes where they were.

Laws (all follow from `shift >= bits`, which keeps the source and target fields
disjoint, so the source field is never changed):
- an involution: `apply(apply(a)) == a`;
- it only changes bits below `base + shift + bits`, so it maps every aligned block of
  `period = 2**(base + shift + bits)` bytes onto itself: a bijection on each block.

`bits == 0` is the identity swizzle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from tilevm.layouts.errors import LayoutError

_Addr = TypeVar("_Addr", int, np.ndarray)

# Addresses are at most 64-bit; a field above that is a user error, not a swizzle.
_MAX_TOP_BIT = 48


@dataclass(frozen=True)
class Swizzle:
    """XOR the `bits`-bit field at byte-address bit `base + shift` into the one at `base`."""

    bits: int
    base: int
    shift: int

    def __post_init__(self) -> None:
        for name in ("bits", "base", "shift"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise LayoutError(f"Swizzle {name} must be an int, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.bits < 0 or self.base < 0:
            raise LayoutError(f"Swizzle(bits={self.bits}, base={self.base}, shift={self.shift}): "
                              f"bits and base must be >= 0")
        if self.shift < self.bits:
            raise LayoutError(
                f"Swizzle(bits={self.bits}, base={self.base}, shift={self.shift}): shift must be "
                f">= bits, or the source field [{self.base + self.shift}, "
                f"{self.base + self.shift + self.bits}) overlaps the target field "
                f"[{self.base}, {self.base + self.bits}) and the map is no involution")
        if self.base + self.shift + self.bits > _MAX_TOP_BIT:
            raise LayoutError(f"{self}: fields reach bit {self.base + self.shift + self.bits}, "
                              f"beyond any shared-memory address (limit {_MAX_TOP_BIT})")

    def __str__(self) -> str:
        return f"Swizzle(bits={self.bits}, base={self.base}, shift={self.shift})"

    @classmethod
    def identity(cls) -> Swizzle:
        return cls(0, 0, 0)

    @property
    def is_identity(self) -> bool:
        return self.bits == 0

    @property
    def mask(self) -> int:
        return (1 << self.bits) - 1

    @property
    def target_bits(self) -> range:
        """Byte-address bit positions that the swizzle changes."""
        return range(self.base, self.base + self.bits)

    @property
    def source_bits(self) -> range:
        """Byte-address bit positions that select the XOR pattern."""
        return range(self.base + self.shift, self.base + self.shift + self.bits)

    @property
    def unit_bytes(self) -> int:
        """Size of the chunks that move as a whole (their bytes keep their order)."""
        return 1 << self.base

    @property
    def period(self) -> int:
        """Size in bytes of the aligned blocks the swizzle permutes within.

        A swizzled allocation must start at a multiple of this (or of any larger power
        of two) for offsets relative to its start to mean what `apply` says.
        """
        return 1 << (self.base + self.shift + self.bits) if self.bits else 1

    def apply(self, addr: _Addr) -> _Addr:
        """The swizzled byte address of `addr` (an int or an integer numpy array)."""
        if self.bits == 0:
            return addr
        if isinstance(addr, np.ndarray) or isinstance(addr, np.integer):
            arr = np.asarray(addr)
            if arr.dtype.kind not in "iu":
                raise LayoutError(f"byte addresses must be integers, got numpy dtype {arr.dtype}")
            if arr.size and arr.min() < 0:
                raise LayoutError(f"byte addresses must be >= 0, got {arr.min()}")
            pattern = (arr >> (self.base + self.shift)) & self.mask
            out = arr ^ (pattern << self.base)
            return out if isinstance(addr, np.ndarray) else out[()]
        if isinstance(addr, bool) or not isinstance(addr, int):
            raise LayoutError(f"a byte address is an int or an integer array, got {addr!r}")
        if addr < 0:
            raise LayoutError(f"byte addresses must be >= 0, got {addr}")
        return addr ^ (((addr >> (self.base + self.shift)) & self.mask) << self.base)

    __call__ = apply
