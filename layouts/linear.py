"""The GF(2) linear view of power-of-two register layouts.

When a layout's thread count, local size and every tile dimension are powers of two,
its map `(thread, local) -> coordinate` is usually linear over GF(2): each input bit
moves (or, when replicated, drops) and the output is the XOR of the images of the
input bits that are set. Analyses that would otherwise loop over every element
(vector width, bank conflicts, which shuffles a layout conversion needs) become
rank and kernel computations on a small bit matrix. The primary form stays the
`RegisterLayout`; `to_linear` derives the matrix from the images of the basis
vectors and then checks it against `global_index` on every point, so a layout that
is not linear is reported instead of silently mis-analysed.

Bit-order conventions (one for the whole package):

- **input** bit vector: the integer `thread * local_size + local`. The
  `log2(local_size)` local-index bits are the low bits (bit 0 = local bit 0), the
  `log2(num_threads)` thread-index bits follow above them.
- **output** bit vector: the row-major offset of the coordinate in the tile,
  `sum(coord[d] * prod(shape[d+1:]))`. The last dimension owns the lowest
  `log2(shape[-1])` bits, dimension 0 the highest; a dimension of extent 1 owns none.

A `LinearMap` is a plain bit matrix and knows nothing of layouts: column `j`
(an int) is the image of input basis vector `e_j`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tilevm.layouts.errors import LayoutError
from tilevm.layouts.register_layout import RegisterLayout


def _is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _log2(n: int) -> int:
    return n.bit_length() - 1


@dataclass(frozen=True)
class LinearMap:
    """A linear map GF(2)^in_bits -> GF(2)^out_bits, stored by columns.

    `columns[j]` is the image of input bit `j`, an int below `2**out_bits` (bit `i` of
    it is matrix entry (i, j)). Equality is equality of matrices.
    """

    in_bits: int
    out_bits: int
    columns: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.in_bits < 0 or self.out_bits < 0:
            raise LayoutError(f"bit counts must be >= 0, got {self.in_bits}, {self.out_bits}")
        cols = tuple(int(c) for c in self.columns)
        object.__setattr__(self, "columns", cols)
        if len(cols) != self.in_bits:
            raise LayoutError(f"a map of {self.in_bits} input bits needs {self.in_bits} "
                              f"columns, got {len(cols)}")
        limit = 1 << self.out_bits
        for j, c in enumerate(cols):
            if not 0 <= c < limit:
                raise LayoutError(f"column {j} = {c:#x} does not fit in {self.out_bits} bits")

    # ---- construction ---------------------------------------------------------------
    @classmethod
    def identity(cls, bits: int) -> LinearMap:
        return cls(bits, bits, tuple(1 << j for j in range(bits)))

    @classmethod
    def zero(cls, in_bits: int, out_bits: int) -> LinearMap:
        return cls(in_bits, out_bits, (0,) * in_bits)

    @classmethod
    def from_function(cls, f: Callable[[int], int], in_bits: int, out_bits: int) -> LinearMap:
        """The matrix whose columns are `f(e_j)`; assumes (does not check) f is linear."""
        return cls(in_bits, out_bits, tuple(f(1 << j) for j in range(in_bits)))

    @classmethod
    def from_matrix(cls, matrix: np.ndarray | Sequence[Sequence[int]]) -> LinearMap:
        """From a 0/1 matrix of shape (out_bits, in_bits): entry (i, j) is bit i of column j."""
        m = np.asarray(matrix, dtype=np.int64)
        if m.ndim != 2 or (m.size and not np.isin(m, (0, 1)).all()):
            raise LayoutError(f"expected a 2-D 0/1 matrix, got shape {m.shape}")
        out_bits, in_bits = m.shape
        cols = tuple(sum(int(m[i, j]) << i for i in range(out_bits)) for j in range(in_bits))
        return cls(in_bits, out_bits, cols)

    def matrix(self) -> np.ndarray:
        """The (out_bits, in_bits) uint8 matrix: entry (i, j) is bit i of column j."""
        m = np.zeros((self.out_bits, self.in_bits), dtype=np.uint8)
        for j, c in enumerate(self.columns):
            for i in range(self.out_bits):
                m[i, j] = (c >> i) & 1
        return m

    # ---- evaluation -----------------------------------------------------------------
    def apply(self, x: int) -> int:
        """The image of the input bit vector `x` (an int below `2**in_bits`)."""
        if not 0 <= x < (1 << self.in_bits):
            raise LayoutError(f"input {x} does not fit in {self.in_bits} bits")
        y = 0
        j = 0
        while x:
            if x & 1:
                y ^= self.columns[j]
            x >>= 1
            j += 1
        return y

    __call__ = apply

    def apply_array(self, xs: np.ndarray) -> np.ndarray:
        """`apply` on an integer array, vectorized (one pass per input bit)."""
        xs = np.asarray(xs, dtype=np.int64)
        ys = np.zeros_like(xs)
        for j, c in enumerate(self.columns):
            ys ^= np.where((xs >> j) & 1, np.int64(c), np.int64(0))
        return ys

    def compose(self, other: LinearMap) -> LinearMap:
        """`self ∘ other`: first `other`, then `self`."""
        if other.out_bits != self.in_bits:
            raise LayoutError(f"cannot compose: inner map gives {other.out_bits} bits, "
                              f"outer map takes {self.in_bits}")
        return LinearMap(other.in_bits, self.out_bits,
                         tuple(self.apply(c) for c in other.columns))

    # ---- linear algebra -------------------------------------------------------------
    def _echelon(self) -> tuple[dict[int, tuple[int, int]], list[int]]:
        # Insert the columns one by one, each carried with the input combination that
        # produces it. Returns {pivot bit: (vector, combination)} with distinct highest
        # bits, and the combinations whose image reduced to zero (a kernel basis).
        pivots: dict[int, tuple[int, int]] = {}
        kernel: list[int] = []
        for j, col in enumerate(self.columns):
            vec, combo = col, 1 << j
            while vec:
                top = vec.bit_length() - 1
                if top not in pivots:
                    pivots[top] = (vec, combo)
                    break
                pv, pc = pivots[top]
                vec ^= pv
                combo ^= pc
            else:
                kernel.append(combo)
        return pivots, kernel

    @property
    def rank(self) -> int:
        return len(self._echelon()[0])

    def kernel(self) -> tuple[int, ...]:
        """A basis of the null space: input vectors the map sends to 0."""
        return tuple(self._echelon()[1])

    @property
    def is_injective(self) -> bool:
        return self.rank == self.in_bits

    @property
    def is_surjective(self) -> bool:
        return self.rank == self.out_bits

    @property
    def is_bijective(self) -> bool:
        return self.in_bits == self.out_bits == self.rank

    def solve(self, y: int) -> int | None:
        """Some `x` with `apply(x) == y`, or None when `y` is not in the image."""
        if not 0 <= y < (1 << self.out_bits):
            raise LayoutError(f"output {y} does not fit in {self.out_bits} bits")
        pivots, _ = self._echelon()
        x = 0
        for top in sorted(pivots, reverse=True):
            if (y >> top) & 1:
                vec, combo = pivots[top]
                y ^= vec
                x ^= combo
        return x if y == 0 else None

    def inverse(self) -> LinearMap:
        """The inverse map; LayoutError unless the matrix is square and non-singular."""
        if self.in_bits != self.out_bits:
            raise LayoutError(f"a {self.out_bits}x{self.in_bits} bit matrix has no inverse "
                              f"(not square)")
        if self.rank != self.in_bits:
            raise LayoutError(f"the bit matrix is singular (rank {self.rank} of "
                              f"{self.in_bits}); it has no inverse")
        cols = []
        for i in range(self.out_bits):
            x = self.solve(1 << i)
            assert x is not None  # full rank: every basis vector has a preimage
            cols.append(x)
        return LinearMap(self.out_bits, self.in_bits, tuple(cols))

    def __str__(self) -> str:
        rows = ("".join(str(b) for b in row) for row in self.matrix())
        return f"LinearMap({self.out_bits}x{self.in_bits})\n" + "\n".join(rows)


# ---- register layouts <-> bit vectors ---------------------------------------------------
def _require_pow2(layout: RegisterLayout) -> None:
    bad = [f"num_threads={layout.num_threads}"] if not _is_pow2(layout.num_threads) else []
    if not _is_pow2(layout.local_size):
        bad.append(f"local_size={layout.local_size}")
    bad += [f"shape[{d}]={s}" for d, s in enumerate(layout.shape) if not _is_pow2(s)]
    if bad:
        raise LayoutError(f"the GF(2) linear view needs powers of two; {layout!r} has "
                          + ", ".join(bad))


def dim_bit_offsets(shape: Sequence[int]) -> tuple[int, ...]:
    """Lowest output bit of each dimension (row-major: the last dimension starts at 0)."""
    offsets = []
    acc = 0
    for s in reversed(tuple(shape)):
        offsets.append(acc)
        acc += _log2(s)
    return tuple(reversed(offsets))


def encode_coord(shape: Sequence[int], coord: Iterable[int]) -> int:
    """The output bit vector of a coordinate: its row-major offset in a power-of-two tile."""
    out = 0
    for c, s in zip(coord, shape, strict=True):
        out = out * s + int(c)
    return out


def decode_coord(shape: Sequence[int], bits: int) -> tuple[int, ...]:
    """Inverse of `encode_coord`."""
    coord = []
    for s in reversed(tuple(shape)):
        coord.append(bits % s)
        bits //= s
    return tuple(reversed(coord))


def to_linear(layout: RegisterLayout) -> LinearMap:
    """The GF(2) matrix of a power-of-two layout, checked against it on every point.

    Input and output bit orders are in the module docstring. Raises LayoutError when a
    size is not a power of two, or when the layout is not GF(2)-linear (the matrix built
    from the basis images disagrees with `global_index` somewhere).
    """
    _require_pow2(layout)
    shape = tuple(layout.shape)
    local_bits = _log2(layout.local_size)
    thread_bits = _log2(layout.num_threads)
    out_bits = sum(_log2(s) for s in shape)
    cols = [encode_coord(shape, layout.global_index(0, 1 << j)) for j in range(local_bits)]
    cols += [encode_coord(shape, layout.global_index(1 << k, 0)) for k in range(thread_bits)]
    lin = LinearMap(local_bits + thread_bits, out_bits, tuple(cols))

    table = np.asarray(layout.table(), dtype=np.int64).reshape(-1, len(shape))
    actual = np.zeros(table.shape[0], dtype=np.int64)
    for d, s in enumerate(shape):
        actual = actual * s + table[:, d]
    predicted = lin.apply_array(np.arange(table.shape[0], dtype=np.int64))
    wrong = np.flatnonzero(actual != predicted)
    if wrong.size:
        x = int(wrong[0])
        t, loc = divmod(x, layout.local_size)
        raise LayoutError(
            f"{layout!r} is not GF(2)-linear: (thread {t}, local {loc}) maps to "
            f"{tuple(int(v) for v in table[x])}, the XOR of its basis images gives "
            f"{decode_coord(shape, int(predicted[x]))}")
    return lin


def from_linear(lin: LinearMap, shape: Sequence[int], local_size: int) -> RegisterLayout:
    """The register layout whose GF(2) view is `lin` (the inverse of `to_linear`).

    `shape` fixes the output bits, `local_size` how the input splits into local and thread
    bits. Raises LayoutError when no register layout computes the map (an XOR of two
    input bits into one coordinate bit, say: that is a swizzle, not a register layout).
    """
    shape = tuple(int(s) for s in shape)
    if not all(_is_pow2(s) for s in shape) or not _is_pow2(local_size):
        raise LayoutError(f"from_linear needs powers of two, got shape {shape} and "
                          f"local_size {local_size}")
    if sum(_log2(s) for s in shape) != lin.out_bits or _log2(local_size) > lin.in_bits:
        raise LayoutError(f"a {lin.out_bits}x{lin.in_bits} bit matrix does not fit shape "
                          f"{shape} with {local_size} locals per thread")
    out = lin.apply_array(np.arange(1 << lin.in_bits, dtype=np.int64))
    table = np.zeros((out.size, len(shape)), dtype=np.int64)
    for d in reversed(range(len(shape))):
        out, table[:, d] = np.divmod(out, shape[d])
    num_threads = (1 << lin.in_bits) // local_size
    return RegisterLayout.from_table(table.reshape(num_threads, local_size, len(shape)), shape)


def contiguous_local_bits(layout: RegisterLayout, dim: int = -1) -> int:
    """log2 of the vector width of `layout` along `dim` (see `vector_width`).

    The largest k such that local bit i (i < k) maps exactly to bit i of coordinate
    `dim` and no other input bit touches the low k bits of that coordinate. The second
    condition makes every aligned run of 2**k locals start at a coordinate that is a
    multiple of 2**k, so XOR-ing in the low local bits is the same as adding them.
    """
    lin = to_linear(layout)
    shape = tuple(layout.shape)
    d = range(len(shape))[dim]
    off = dim_bit_offsets(shape)[d]
    width = _log2(shape[d])
    local_bits = _log2(layout.local_size)
    k = 0
    while k < min(local_bits, width) and lin.columns[k] == 1 << (off + k):
        k += 1
    while k:
        low = ((1 << k) - 1) << off
        if all(c & low == 0 for c in lin.columns[k:]):
            return k
        k -= 1
    return 0


def vector_width(layout: RegisterLayout, dim: int = -1) -> int:
    """How many consecutive local indices hold consecutive elements along `dim`.

    A power of two w: for every thread and every local index l that is a multiple of w,
    locals l, l+1, ..., l+w-1 sit at coordinates c, c+1, ..., c+w-1 along `dim` (the
    other coordinates equal), with c a multiple of w. These w elements can move with a
    single vector instruction when the memory side is contiguous along `dim` too.
    """
    return 1 << contiguous_local_bits(layout, dim)
