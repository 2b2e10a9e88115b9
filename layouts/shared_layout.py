"""`SharedLayout`: where each element of a shared-memory tile sits, down to the bit.

A shared layout is strided modes (shape and strides, both counted in *elements*), the
element width in bits, and an optional `Swizzle` that permutes *byte* addresses.
Element `c` (a coordinate tuple) sits at

    linear_bits = (sum_i c[i] * strides[i]) * element_bits
    offset_bits = swizzle(linear_bits // 8) * 8 + linear_bits % 8
    offset_bytes = offset_bits // 8            (the byte holding the element's first bit)

Sub-byte elements are bit-packed little-endian inside bytes (element `i` of a dense run
at bits `[i*b, (i+1)*b)`, as `tilevm.dtypes.pack` does), so several elements share one
byte address and `offset_bits` tells them apart. Offsets are relative to the start of
the allocation, which must be aligned to `swizzle.period` bytes.

A swizzled layout requires `element_bits` to divide the swizzle unit (`8 * 2**base`
bits), so no element is split between two chunks that the swizzle moves apart.

Bank model (every NVIDIA GPU since Maxwell): 32 banks of 4 bytes; byte `a` is in bank
`(a // 4) % 32`. One *wavefront* serves at most one distinct 4-byte word per bank
(threads reading the same word share it). A 16-byte access is served 8 threads at a
time; the 8 chunks of such a phase are conflict-free iff they fall into the 8 distinct
16-byte *bank groups* `(a // 16) % 8`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tilevm.dtypes import DataType, parse
from tilevm.layouts.errors import LayoutError
from tilevm.layouts.swizzle import Swizzle

NUM_BANKS = 32
BANK_BYTES = 4
BANK_GROUP_BYTES = 16
NUM_BANK_GROUPS = NUM_BANKS * BANK_BYTES // BANK_GROUP_BYTES  # 8
LDMATRIX_ROWS = 8  # rows of 16 bytes that one ldmatrix phase reads

DTypeLike = DataType | str | int


def element_bits_of(dtype: DTypeLike) -> int:
    """The bit width of a `DataType`, a type name, or a plain width in bits."""
    if isinstance(dtype, bool):
        raise LayoutError(f"an element width is a DataType, a type name or an int, not {dtype!r}")
    if isinstance(dtype, (int, np.integer)):
        bits = int(dtype)
    else:
        try:
            bits = parse(dtype).bits
        except ValueError as exc:
            raise LayoutError(str(exc)) from exc
    if not 1 <= bits <= 32:
        raise LayoutError(f"shared layouts hold elements of 1..32 bits, got {bits}")
    return bits


def _int_tuple(values: Iterable[int], what: str) -> tuple[int, ...]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise LayoutError(f"{what} must hold ints, got {v!r}")
        out.append(int(v))
    return tuple(out)


@dataclass(frozen=True)
class SharedLayout:
    """Strided modes over `element_bits`-bit elements, then an optional byte swizzle.

    `element_bits` accepts a `DataType` or a type name too and stores the width.
    """

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    element_bits: int
    swizzle: Swizzle | None = None

    def __post_init__(self) -> None:
        shape = _int_tuple(self.shape, "shape")
        strides = _int_tuple(self.strides, "strides")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "strides", strides)
        object.__setattr__(self, "element_bits", element_bits_of(self.element_bits))
        if len(shape) != len(strides):
            raise LayoutError(f"shape {shape} and strides {strides} differ in rank")
        if any(n < 1 for n in shape):
            raise LayoutError(f"shape {shape}: every extent must be >= 1")
        if any(s < 0 for s in strides):
            raise LayoutError(f"strides {strides}: shared-memory strides must be >= 0")
        sw = self.swizzle
        if sw is not None and not isinstance(sw, Swizzle):
            raise LayoutError(f"swizzle must be a Swizzle or None, got {sw!r}")
        if sw is not None and sw.is_identity:
            object.__setattr__(self, "swizzle", None)  # one spelling of "no swizzle"
        elif sw is not None and (8 * sw.unit_bytes) % self.element_bits:
            raise LayoutError(
                f"{sw} moves {sw.unit_bytes}-byte chunks, which {self.element_bits}-bit elements "
                f"do not tile: an element would be split between two chunks")

    def __str__(self) -> str:
        # A constructor call: the layout text syntax (and Python) read it back.
        sw = f", {self.swizzle}" if self.swizzle else ""
        return f"SharedLayout({self.shape}, {self.strides}, {self.element_bits}{sw})"

    # ---- sizes -------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def size_bytes(self) -> int:
        """Bytes the allocation needs: one past the last byte any element touches."""
        ends = self.all_offset_bits() + self.element_bits
        return -(-int(ends.max()) // 8)

    # ---- addresses ---------------------------------------------------------------------
    def _check_coord(self, coord: Sequence[int]) -> tuple[int, ...]:
        coord = _int_tuple(coord, "a coordinate")
        if len(coord) != self.rank:
            raise LayoutError(f"coordinate {coord} has rank {len(coord)}, layout {self} has "
                              f"rank {self.rank}")
        for c, n in zip(coord, self.shape, strict=True):
            if not 0 <= c < n:
                raise LayoutError(f"coordinate {coord} is outside shape {self.shape}")
        return coord

    def offset_bits(self, coord: Sequence[int]) -> int:
        """Bit address of element `coord`'s first (least significant) bit."""
        coord = self._check_coord(coord)
        linear = sum(c * s for c, s in zip(coord, self.strides, strict=True)) * self.element_bits
        if self.swizzle is None:
            return linear
        return self.swizzle.apply(linear // 8) * 8 + linear % 8

    def offset_bytes(self, coord: Sequence[int]) -> int:
        """Byte address of element `coord`: the byte that holds its first bit."""
        return self.offset_bits(coord) // 8

    def all_offset_bits(self) -> np.ndarray:
        """`offset_bits` of every element, as an int64 array of `shape`."""
        linear = np.zeros(self.shape, dtype=np.int64)
        for axis, (n, s) in enumerate(zip(self.shape, self.strides, strict=True)):
            index = np.arange(n, dtype=np.int64).reshape([-1 if a == axis else 1
                                                          for a in range(self.rank)])
            linear = linear + index * s
        linear = linear * self.element_bits
        if self.swizzle is None:
            return linear
        return self.swizzle.apply(linear // 8) * 8 + linear % 8

    def all_offset_bytes(self) -> np.ndarray:
        """`offset_bytes` of every element, as an int64 array of `shape`."""
        return self.all_offset_bits() // 8

    # ---- transformations ---------------------------------------------------------------
    def with_swizzle(self, swizzle: Swizzle | None) -> SharedLayout:
        return SharedLayout(self.shape, self.strides, self.element_bits, swizzle)

    def permute(self, dims: Sequence[int]) -> SharedLayout:
        """The same bytes with the dimensions reordered: dimension `i` of the result is
        dimension `dims[i]` of this layout, so element `c` of the result is element
        `c'` here with `c'[dims[i]] = c[i]`.

        `swizzled([bm, bk], f16).permute((1, 0))` is a `[bk, bm]` tile whose dimension 0
        is contiguous: the transposed view of the same swizzled bytes. The swizzle acts on
        byte addresses, not on coordinates, so it is kept as it is.
        """
        dims = _int_tuple(dims, "permute dims")
        if sorted(dims) != list(range(self.rank)):
            raise LayoutError(f"permute dims {dims} are not a permutation of "
                              f"{tuple(range(self.rank))} (the layout has rank {self.rank})")
        return SharedLayout(tuple(self.shape[d] for d in dims),
                            tuple(self.strides[d] for d in dims), self.element_bits,
                            self.swizzle)

    def recast(self, new_bits: DTypeLike) -> SharedLayout:
        """The same bytes seen as `new_bits`-bit elements; the last dimension is rescaled.

        f16 (64, 64) becomes 4-bit (64, 256): element (r, c) of the f16 layout covers
        exactly the bits of 4-bit elements (r, 4c..4c+3). The last dimension must be
        contiguous (stride 1, or extent 1), its bits and every other stride's bits must
        be multiples of the new width; the swizzle (on bytes) is kept as it is.
        """
        new = element_bits_of(new_bits)
        old = self.element_bits
        if self.rank == 0:
            raise LayoutError("cannot recast a rank-0 layout: it has no last dimension")
        if self.shape[-1] != 1 and self.strides[-1] != 1:
            raise LayoutError(f"cannot recast {self}: the last dimension is not contiguous "
                              f"(stride {self.strides[-1]}, must be 1)")
        row_bits = self.shape[-1] * old
        if row_bits % new:
            raise LayoutError(f"cannot recast {self} to {new}-bit elements: the last dimension "
                              f"holds {row_bits} bits, not a multiple of {new}")
        for axis, s in enumerate(self.strides[:-1]):
            if (s * old) % new:
                raise LayoutError(f"cannot recast {self} to {new}-bit elements: stride {s} of "
                                  f"dimension {axis} is {s * old} bits, not a multiple of {new}")
        strides = tuple(s * old // new for s in self.strides[:-1]) + (1,)
        shape = self.shape[:-1] + (row_bits // new,)
        return SharedLayout(shape, strides, new, self.swizzle)

    # ---- pictures ----------------------------------------------------------------------
    def _grid(self, show: str) -> np.ndarray:
        if show == "byte":
            values = self.all_offset_bytes()
        elif show == "bit":
            values = self.all_offset_bits()
        elif show == "bank":
            values = bank_of(self.all_offset_bytes())
        else:
            raise LayoutError(f"show must be 'byte', 'bit' or 'bank', got {show!r}")
        if self.rank == 1:
            return values.reshape(1, -1)
        if self.rank == 0:
            return values.reshape(1, 1)
        return values.reshape(-1, self.shape[-1])  # leading dimensions stacked as rows

    def to_text(self, show: str = "byte") -> str:
        """A grid with one cell per element: its byte offset, bit offset or bank.

        Rows are the last dimension's runs (leading dimensions stacked in row-major order).
        """
        grid = self._grid(show)
        width = max(len(str(int(grid.max()))), 1)
        lines = [" ".join(f"{int(v):>{width}}" for v in row) for row in grid]
        return "\n".join(lines) + "\n"

    def to_svg(self, cell: int = 24) -> str:
        """An SVG grid, one cell per element, colored by bank and labeled with its bank."""
        banks = self._grid("bank")
        rows, cols = banks.shape
        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{cols * cell}" '
            f'height="{rows * cell}" font-family="monospace" font-size="{cell // 2}">',
            f"<title>{_xml_escape(str(self))}: bank of each element</title>",
        ]
        for (r, c), bank in np.ndenumerate(banks):
            hue = int(bank) * 360 // NUM_BANKS
            x, y = c * cell, r * cell
            parts.append(
                f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" '
                f'fill="hsl({hue},70%,75%)" stroke="#444" stroke-width="0.5"/>'
                f'<text x="{x + cell // 2}" y="{y + cell * 2 // 3}" '
                f'text-anchor="middle">{int(bank)}</text>')
        parts.append("</svg>")
        return "\n".join(parts) + "\n"


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# ---- constructors ------------------------------------------------------------------------

def _row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def row_major(shape: Sequence[int], dtype: DTypeLike) -> SharedLayout:
    """Dense, last dimension contiguous, no swizzle."""
    shape = _int_tuple(shape, "shape")
    return SharedLayout(shape, _row_major_strides(shape), element_bits_of(dtype))


def column_major(shape: Sequence[int], dtype: DTypeLike) -> SharedLayout:
    """Dense, first dimension contiguous, no swizzle."""
    shape = _int_tuple(shape, "shape")
    return SharedLayout(shape, _row_major_strides(shape[::-1])[::-1], element_bits_of(dtype))


def ldmatrix_swizzle(row_bytes: int, element_bits: int = 8) -> Swizzle | None:
    """The swizzle that makes ldmatrix of a row-major tile with `row_bytes`-byte rows
    conflict-free, or None where none is needed or none is possible.

    Write the row size as `16 * C` bytes (C 16-byte chunks), `C = 2**k * odd`. The
    8 chunks an ldmatrix phase reads (same chunk column, 8 consecutive rows) have
    16-byte unit indices `u = row * C + chunk`, and land in bank groups `u % 8`.
    - k == 0 (C odd): `row * C` already takes 8 distinct values mod 8: no swizzle.
    - k >= 1: `u >> k = row * odd + const` takes 8 distinct values mod 8 over the
      rows, so XORing unit bits `[max(k,3), max(k,3) + min(k,3))` into unit bits
      `[0, min(k,3))` makes `u % 8` distinct: `Swizzle(min(k,3), 4, max(k,3))`.
      The target bits lie inside the chunk index (they are below bit k), so chunks
      only move within their row: the tile's footprint is unchanged.
    Not possible (None): rows that are not a whole number of 16-byte chunks (ldmatrix
    needs 16-byte aligned rows), or elements that do not divide a 16-byte chunk.
    """
    if row_bytes <= 0 or row_bytes % BANK_GROUP_BYTES or (8 * BANK_GROUP_BYTES) % element_bits:
        return None
    chunks = row_bytes // BANK_GROUP_BYTES
    k = (chunks & -chunks).bit_length() - 1  # trailing zeros
    if k == 0:
        return None
    field = NUM_BANK_GROUPS.bit_length() - 1  # 3 bits name a bank group
    return Swizzle(min(k, field), BANK_GROUP_BYTES.bit_length() - 1, max(k, field))


def swizzled(shape: Sequence[int], dtype: DTypeLike) -> SharedLayout:
    """Row-major with the swizzle that makes ldmatrix phases conflict-free.

    Leading dimensions count as rows; see `ldmatrix_swizzle` for the choice, and for
    when the layout stays unswizzled (not needed, or not possible).
    """
    layout = row_major(shape, dtype)
    if layout.rank < 2:
        raise LayoutError(f"swizzled() needs a rank >= 2 shape (rows, columns), got {shape}")
    row_bits = layout.shape[-1] * layout.element_bits
    if row_bits % 8:
        return layout
    return layout.with_swizzle(ldmatrix_swizzle(row_bits // 8, layout.element_bits))


# ---- bank analysis -----------------------------------------------------------------------

def bank_of(byte_addr: int | np.ndarray) -> int | np.ndarray:
    """The bank (0..31) of a byte address."""
    return (byte_addr // BANK_BYTES) % NUM_BANKS


def wavefronts_for_bytes(byte_ranges: Iterable[tuple[int, int]]) -> int:
    """Wavefronts one phase needs to touch the byte ranges `[start, start + length)`.

    Each wavefront serves at most one distinct 4-byte word per bank, so the count is the
    largest number of distinct words asked of any one bank (0 for no access).
    """
    words_per_bank: dict[int, set[int]] = {}
    for start, length in byte_ranges:
        if start < 0 or length < 1:
            raise LayoutError(f"byte range ({start}, {length}) must have start >= 0, length >= 1")
        for word in range(start // BANK_BYTES, (start + length - 1) // BANK_BYTES + 1):
            words_per_bank.setdefault(word % NUM_BANKS, set()).add(word)
    return max((len(words) for words in words_per_bank.values()), default=0)


def _access_bytes(layout: SharedLayout, access_bytes: int | None) -> int:
    if access_bytes is None:
        return -(-layout.element_bits // 8)
    if access_bytes < 1:
        raise LayoutError(f"access_bytes must be >= 1, got {access_bytes}")
    return access_bytes


def wavefronts(layout: SharedLayout, coords: Iterable[Sequence[int]],
               access_bytes: int | None = None) -> int:
    """Wavefronts one phase of accesses needs; each access starts at an element's byte.

    `access_bytes` is the width of each access (default: one element, rounded up to
    whole bytes); a 16-byte access at element `c` reads `offset_bytes(c)` onward.
    """
    width = _access_bytes(layout, access_bytes)
    return wavefronts_for_bytes((layout.offset_bytes(c), width) for c in coords)


def bank_conflicts(layout: SharedLayout, coords_per_phase: Iterable[Iterable[Sequence[int]]],
                   access_bytes: int | None = None) -> int:
    """Extra wavefronts caused by bank conflicts, summed over the phases.

    Each phase needs at least `ceil(distinct words / 32)` wavefronts; anything above that
    is a conflict. 0 means conflict-free.
    """
    width = _access_bytes(layout, access_bytes)
    extra = 0
    for phase in coords_per_phase:
        ranges = [(layout.offset_bytes(c), width) for c in phase]
        words = {w for start, n in ranges
                 for w in range(start // BANK_BYTES, (start + n - 1) // BANK_BYTES + 1)}
        extra += wavefronts_for_bytes(ranges) - -(-len(words) // NUM_BANKS)
    return extra


def ldmatrix_phase_coords(layout: SharedLayout, row_group: int,
                          chunk: int) -> list[tuple[int, int]]:
    """The 8 element coordinates that start one ldmatrix phase of a rank-2 layout.

    Rows `8 * row_group .. 8 * row_group + 7`, at the first element of 16-byte column
    chunk `chunk` (column `chunk * 128 // element_bits`).
    """
    if layout.rank != 2:
        raise LayoutError(f"ldmatrix phases are defined for rank-2 layouts, got {layout}")
    if (8 * BANK_GROUP_BYTES) % layout.element_bits:
        raise LayoutError(f"{layout.element_bits}-bit elements do not tile a 16-byte chunk")
    per_chunk = 8 * BANK_GROUP_BYTES // layout.element_bits
    rows, cols = layout.shape
    row0 = LDMATRIX_ROWS * row_group
    if row0 < 0 or row0 + LDMATRIX_ROWS > rows or chunk < 0 or (chunk + 1) * per_chunk > cols:
        raise LayoutError(f"ldmatrix phase (row group {row_group}, chunk {chunk}) is outside "
                          f"{layout}")
    return [(row0 + i, chunk * per_chunk) for i in range(LDMATRIX_ROWS)]


def ldmatrix_phase_bank_groups(layout: SharedLayout, row_group: int,
                               chunk: int) -> tuple[int, ...]:
    """The 16-byte bank groups `(byte // 16) % 8` of the 8 chunks of one ldmatrix phase.

    The phase is conflict-free iff the 8 groups are distinct.
    """
    return tuple((layout.offset_bytes(c) // BANK_GROUP_BYTES) % NUM_BANK_GROUPS
                 for c in ldmatrix_phase_coords(layout, row_group, chunk))


def ldmatrix_conflict_free(layout: SharedLayout) -> bool:
    """Whether every ldmatrix phase (every row group of 8, every 16-byte chunk column) of a
    rank-2 layout hits 8 distinct bank groups."""
    if layout.rank != 2 or (8 * BANK_GROUP_BYTES) % layout.element_bits:
        raise LayoutError(f"ldmatrix phases need a rank-2 layout whose elements tile a 16-byte "
                          f"chunk, got {layout}")
    per_chunk = 8 * BANK_GROUP_BYTES // layout.element_bits
    return all(
        len(set(ldmatrix_phase_bank_groups(layout, g, j))) == LDMATRIX_ROWS
        for g, j in itertools.product(range(layout.shape[0] // LDMATRIX_ROWS),
                                      range(layout.shape[1] // per_chunk)))
