"""`RegisterLayout`: which thread of a block holds which element of a register tile, and in
which of its registers (its *local index*).

The model
---------
Every dimension of the tile is split into **modes** (mixed-radix digits of that dimension's
coordinate, major -> minor). Each mode is a digit either of the thread index (a *spatial*
mode) or of the per-thread local index (a *local* mode). The thread index may also carry
**replication** digits, written ``-r`` in ``spatial_modes``: the ``r`` threads that differ
only in that digit hold the same elements. To evaluate the layout, split the thread index
into digits by ``spatial_modes`` and the local index by ``local_modes`` (major digit first);
each mode receives its digit; a dimension's coordinate is the mixed-radix number formed by
its modes' digits; replication digits are ignored.

Which dimension a mode belongs to is not stored: ``mode_shape`` lists the modes of dim 0,
then dim 1, ..., and in canonical form every mode has size >= 2, so dim ``d`` owns exactly
the shortest run of modes whose product is ``shape[d]`` (`RegisterLayout.mode_dims`).

Canonical form
--------------
Every layout is normalized on construction (``__post_init__``): see
`tilevm.layouts.register_canonical` for the rules and why the form is unique.

Operations
----------
Primitives `local`, `spatial` (row-major: the last dimension varies fastest),
`column_local`, `column_spatial` (the first dimension varies fastest) and `replicated`;
the product ``A * B`` (each element of ``A`` becomes a ``B``-shaped tile; ``A``'s digits are
the major ones), also spelled fluently: ``local(2, 1).spatial(8, 4).local(1, 2)``;
`divide` and `left_divide` (the inverses of the product), `RegisterLayout.reduce`,
``permute``, ``reshape``, ``flatten``, ``squeeze``, ``unsqueeze`` and `concat`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tilevm.layouts.errors import LayoutError
from tilevm.layouts.register_canonical import (
    as_dims,
    as_int,
    as_ints,
    as_shape,
    canonical_form,
    derive_mode_dims,
)
from tilevm.layouts.register_fluent import fluent_spelling

__all__ = [
    "RegisterLayout", "local", "spatial", "column_local", "column_spatial", "replicated",
    "divide", "left_divide", "concat",
]


# ---- the layout ------------------------------------------------------------------------

@dataclass(frozen=True)
class RegisterLayout:
    """A tile distributed over the threads of a block: ``(thread, local) <-> coordinate``.

    Fields (always in canonical form, see the module docstring):

    - ``shape``: the tile's shape;
    - ``mode_shape``: every dim split into modes; dims in order, within a dim major -> minor;
    - ``spatial_modes``: the thread index's digits, major -> minor: a mode index, or ``-r``
      for a replication factor ``r >= 2`` (``r`` threads hold the same data);
    - ``local_modes``: the local index's digits, major -> minor: mode indices.

    Build layouts from the primitives (`local`, `spatial`, ...) and the algebra; the
    constructor accepts any valid field values and normalizes them.
    """

    shape: tuple[int, ...]
    mode_shape: tuple[int, ...]
    spatial_modes: tuple[int, ...]
    local_modes: tuple[int, ...]

    def __post_init__(self) -> None:
        shape = as_shape(self.shape, "shape")
        mode_shape = as_shape(self.mode_shape, "mode_shape")
        spatial_modes = as_ints(self.spatial_modes, "spatial_modes")
        local_modes = as_ints(self.local_modes, "local_modes")
        mode_shape, spatial_modes, local_modes = canonical_form(
            shape, mode_shape, spatial_modes, local_modes)
        for name, value in (("shape", shape), ("mode_shape", mode_shape),
                            ("spatial_modes", spatial_modes), ("local_modes", local_modes)):
            object.__setattr__(self, name, value)
        # Derived tables, kept off the dataclass fields so they play no part in ==/hash.
        mode_dims = derive_mode_dims(shape, mode_shape)
        dim_stride = [1] * len(mode_shape)  # a mode's weight inside its dimension
        for m in reversed(range(len(mode_shape) - 1)):
            if mode_dims[m] == mode_dims[m + 1]:
                dim_stride[m] = dim_stride[m + 1] * mode_shape[m + 1]
        object.__setattr__(self, "_mode_dims", mode_dims)
        object.__setattr__(self, "_dim_stride", tuple(dim_stride))

    # ---- queries ---------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        """The tile's rank."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of tile elements."""
        return math.prod(self.shape)

    @property
    def mode_dims(self) -> tuple[int, ...]:
        """The dimension each mode of ``mode_shape`` belongs to."""
        return self._mode_dims  # type: ignore[attr-defined]

    def _digit_size(self, entry: int) -> int:
        return -entry if entry < 0 else self.mode_shape[entry]

    @property
    def num_threads(self) -> int:
        """Threads that hold the tile (replicas included)."""
        return math.prod(self._digit_size(e) for e in self.spatial_modes)

    @property
    def local_size(self) -> int:
        """Elements each thread holds."""
        return math.prod(self.mode_shape[m] for m in self.local_modes)

    @property
    def replication(self) -> int:
        """How many threads hold each element: the product of the replication factors."""
        return math.prod(-e for e in self.spatial_modes if e < 0)

    def _check_point(self, thread: int, local: int) -> tuple[int, int]:
        thread = as_int(thread, "thread")
        local = as_int(local, "local")
        if not 0 <= thread < self.num_threads:
            raise LayoutError(f"thread {thread} is out of range: {self} has "
                              f"{self.num_threads} threads")
        if not 0 <= local < self.local_size:
            raise LayoutError(f"local index {local} is out of range: {self} holds "
                              f"{self.local_size} elements per thread")
        return thread, local

    def global_index(self, thread: int, local: int) -> tuple[int, ...]:
        """The coordinate of the element that ``thread`` holds at local index ``local``."""
        thread, local = self._check_point(thread, local)
        coord = [0] * self.ndim
        for index, entries in ((thread, self.spatial_modes), (local, self.local_modes)):
            for e in reversed(entries):
                size = self._digit_size(e)
                index, digit = divmod(index, size)
                if e >= 0:
                    coord[self._mode_dims[e]] += digit * self._dim_stride[e]  # type: ignore
        return tuple(coord)

    def _mode_digits(self, coord: Sequence[int]) -> list[int]:
        coord = as_ints(coord, "coordinate")
        if len(coord) != self.ndim or any(not 0 <= c < s for c, s in zip(coord, self.shape)):
            raise LayoutError(f"coordinate {coord} is outside the tile of shape {self.shape}")
        return [(coord[d] // st) % n for d, st, n in
                zip(self._mode_dims, self._dim_stride, self.mode_shape)]  # type: ignore

    def local_index(self, coord: Sequence[int]) -> int:
        """The local index at which every owner of ``coord`` holds it."""
        digits = self._mode_digits(coord)
        local = 0
        for m in self.local_modes:
            local = local * self.mode_shape[m] + digits[m]
        return local

    def owners(self, coord: Sequence[int]) -> tuple[tuple[int, int], ...]:
        """Every ``(thread, local)`` holding ``coord``, sorted; ``replication`` of them."""
        digits = self._mode_digits(coord)
        local = self.local_index(coord)
        threads = [0]
        for e in self.spatial_modes:
            size = self._digit_size(e)
            choices = range(size) if e < 0 else (digits[e],)
            threads = [t * size + c for t in threads for c in choices]
        return tuple((t, local) for t in sorted(threads))

    def table(self) -> np.ndarray:
        """All coordinates: an int64 array ``[thread, local, dim]``, built vectorized."""
        out = np.zeros((self.num_threads, self.local_size, self.ndim), dtype=np.int64)
        for axis, entries in ((0, self.spatial_modes), (1, self.local_modes)):
            count = out.shape[axis]
            index = np.arange(count, dtype=np.int64)
            index = index[:, None] if axis == 0 else index[None, :]
            weight = count
            for e in entries:
                size = self._digit_size(e)
                weight //= size
                if e >= 0:
                    digit = (index // weight) % size
                    out[:, :, self._mode_dims[e]] += digit * self._dim_stride[e]  # type: ignore
        return out

    @classmethod
    def from_table(cls, table: np.ndarray, shape: Sequence[int] | None = None) -> RegisterLayout:
        """The layout whose `table` is ``table`` (``[thread, local, dim]``), or `LayoutError`.

        ``shape`` defaults to one more than the largest coordinate in every dim.
        """
        arr = np.asarray(table)
        if arr.ndim != 3 or arr.shape[0] < 1 or arr.shape[1] < 1 or arr.dtype.kind not in "iu":
            raise LayoutError("a layout table is a non-empty int array [thread, local, dim], "
                              f"got shape {arr.shape} and dtype {arr.dtype}")
        tile = (as_shape(shape, "shape") if shape is not None
                else tuple(int(x) + 1 for x in arr.max(axis=(0, 1))))
        if len(tile) != arr.shape[2] or arr.min(initial=0) < 0 or any(
                int(arr[..., d].max()) >= s for d, s in enumerate(tile)):
            raise LayoutError(f"the table's coordinates do not fit shape {tile}")
        num_threads, local_size = arr.shape[0], arr.shape[1]
        try:
            layout = _recover(tile, num_threads, local_size,
                              lambda x: tuple(int(v) for v in arr[x, 0]),
                              lambda x: tuple(int(v) for v in arr[0, x]))
        except _NotALayout as exc:
            raise LayoutError(
                f"the table is not a register layout of shape {tile}: {exc}") from None
        if not np.array_equal(layout.table(), arr):
            raise LayoutError(f"the table is not a register layout of shape {tile}: it is not "
                              "a mixed-radix function of the thread and local digits")
        return layout

    # ---- product and its fluent spelling ---------------------------------------------
    def __mul__(self, other: RegisterLayout) -> RegisterLayout:
        """Each element of ``self`` becomes an ``other``-shaped tile; ``self``'s digits are the
        major ones: ``(A*B)(tA*nB + tB, lA*lB_size + lB) = A(tA, lA) * B.shape + B(tB, lB)``."""
        if not isinstance(other, RegisterLayout):
            return NotImplemented
        if self.ndim != other.ndim:
            raise LayoutError(f"product needs layouts of one rank: {self} has shape "
                              f"{self.shape}, {other} has shape {other.shape}")
        modes: list[tuple[int, int]] = []
        a_index: dict[int, int] = {}
        b_index: dict[int, int] = {}
        for d in range(self.ndim):
            for src, index in ((self, a_index), (other, b_index)):
                for m, md in enumerate(src.mode_dims):
                    if md == d:
                        index[m] = len(modes)
                        modes.append((d, src.mode_shape[m]))

        def remap(entries: tuple[int, ...], index: dict[int, int]) -> list[int]:
            return [e if e < 0 else index[e] for e in entries]

        return RegisterLayout(
            tuple(a * b for a, b in zip(self.shape, other.shape)),
            tuple(size for _, size in modes),
            tuple(remap(self.spatial_modes, a_index) + remap(other.spatial_modes, b_index)),
            tuple(remap(self.local_modes, a_index) + remap(other.local_modes, b_index)))

    def __truediv__(self, other: RegisterLayout) -> RegisterLayout:
        """``A / B`` is `divide(A, B)`."""
        if not isinstance(other, RegisterLayout):
            return NotImplemented
        return divide(self, other)

    def local(self, *shape: int) -> RegisterLayout:
        """``self * local(*shape)``."""
        return self * local(*shape)

    def spatial(self, *shape: int) -> RegisterLayout:
        """``self * spatial(*shape)``."""
        return self * spatial(*shape)

    def column_local(self, *shape: int) -> RegisterLayout:
        """``self * column_local(*shape)``."""
        return self * column_local(*shape)

    def column_spatial(self, *shape: int) -> RegisterLayout:
        """``self * column_spatial(*shape)``."""
        return self * column_spatial(*shape)

    def replicated(self, n: int) -> RegisterLayout:
        """``self * replicated(n, ndim=self.ndim)``: every element held by ``n`` times as many
        threads, the new replication digit minor to the existing thread digits."""
        return self * replicated(n, ndim=self.ndim)

    # ---- reductions and index maps ---------------------------------------------------
    def reduce(self, dims: int | Sequence[int], keepdims: bool = True) -> RegisterLayout:
        """The layout of the result of reducing over ``dims``.

        The threads that held a reduced dimension keep their thread index: each spatial
        mode of a reduced dim becomes a replication entry of the same size, in place (the
        threads along it all hold the reduced value); local modes of reduced dims are
        dropped. Reduced dims get extent 1, or are removed when ``keepdims`` is false.
        """
        reduced = set(as_dims(dims, self.ndim, "reduce dims"))
        gone = {m for m, d in enumerate(self.mode_dims) if d in reduced}
        keep = [m for m in range(len(self.mode_shape)) if m not in gone]
        index = {m: i for i, m in enumerate(keep)}
        spatial_modes = tuple(-self.mode_shape[e] if e in gone else (e if e < 0 else index[e])
                              for e in self.spatial_modes)
        local_modes = tuple(index[m] for m in self.local_modes if m not in gone)
        shape = tuple(1 if d in reduced else s for d, s in enumerate(self.shape))
        out = RegisterLayout(shape, tuple(self.mode_shape[m] for m in keep),
                             spatial_modes, local_modes)
        return out if keepdims else out.squeeze(tuple(sorted(reduced)))

    def permute(self, dims: Sequence[int]) -> RegisterLayout:
        """Dim ``i`` of the result is dim ``dims[i]`` of ``self``: the result holds
        ``coord[dims]`` where ``self`` holds ``coord``."""
        order = as_dims(dims, self.ndim, "permutation")
        if len(order) != self.ndim:
            raise LayoutError(f"permutation {tuple(dims)} must list all {self.ndim} dims of "
                              f"shape {self.shape}")
        new_order = [m for d in order for m, md in enumerate(self.mode_dims) if md == d]
        index = {m: i for i, m in enumerate(new_order)}
        return RegisterLayout(tuple(self.shape[d] for d in order),
                              tuple(self.mode_shape[m] for m in new_order),
                              tuple(e if e < 0 else index[e] for e in self.spatial_modes),
                              tuple(index[m] for m in self.local_modes))

    def reshape(self, *shape: int | Sequence[int]) -> RegisterLayout:
        """The same threads and registers over the tile reshaped row-major (as numpy's
        ``reshape``; one extent may be -1). A mode is split where a new dim boundary cuts it
        at a divisor; a mode that straddles a boundary otherwise is a `LayoutError`."""
        raw = shape[0] if len(shape) == 1 and isinstance(shape[0], Iterable) else shape
        new = list(as_ints(raw, "reshape target"))
        if new.count(-1) == 1 and all(s >= 1 for s in new if s != -1):
            rest = math.prod(s for s in new if s != -1)
            if self.size % rest == 0:
                new[new.index(-1)] = self.size // rest
        target = as_shape(new, "reshape target")
        if math.prod(target) != self.size:
            raise LayoutError(f"cannot reshape shape {self.shape} ({self.size} elements) to "
                              f"{tuple(raw)}")
        # Dims concatenated major -> minor are the row-major linear index's digits; as one
        # rank-1 layout they merge into the fewest modes, which are then cut at the new
        # dims' boundaries. (Were the reshaped function a layout, its flattening would be
        # this same canonical rank-1 layout, each mode a run of its modes: so every cut
        # falls at a divisor, and a straddling mode means no layout exists.)
        flat = RegisterLayout((self.size,), self.mode_shape, self.spatial_modes,
                              self.local_modes)
        pieces: list[list[int]] = []  # each old mode's pieces (new mode indices), major first
        new_modes: list[int] = []
        d, need = 0, target[0] if target else 1
        for m, size in enumerate(flat.mode_shape):
            parts: list[int] = []
            while size > 1:
                while need == 1:
                    d += 1
                    need = target[d]
                if need % size == 0:
                    parts.append(len(new_modes))
                    new_modes.append(size)
                    need //= size
                    size = 1
                elif size % need == 0:
                    parts.append(len(new_modes))
                    new_modes.append(need)
                    size //= need
                    need = 1
                else:
                    raise LayoutError(
                        f"cannot reshape {self} from {self.shape} to {target}: a digit of size "
                        f"{flat.mode_shape[m]} of the row-major index straddles the boundary "
                        f"of new dim {d} (extent {target[d]})")
            pieces.append(parts)

        def relist(entries: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(x for e in entries for x in ([e] if e < 0 else pieces[e]))

        return RegisterLayout(target, tuple(new_modes), relist(flat.spatial_modes),
                              relist(flat.local_modes))

    def flatten(self) -> RegisterLayout:
        """The rank-1 layout over the row-major linear index."""
        return self.reshape((self.size,))

    def squeeze(self, dims: int | Sequence[int] | None = None) -> RegisterLayout:
        """Remove extent-1 dims: all of them, or those in ``dims`` (which must have extent 1)."""
        if dims is None:
            drop = {d for d, s in enumerate(self.shape) if s == 1}
        else:
            drop = set(as_dims(dims, self.ndim, "squeeze dims"))
            bad = sorted(d for d in drop if self.shape[d] != 1)
            if bad:
                raise LayoutError(f"cannot squeeze dims {bad} of shape {self.shape}: "
                                  "their extents are not 1")
        shape = tuple(s for d, s in enumerate(self.shape) if d not in drop)
        return RegisterLayout(shape, self.mode_shape, self.spatial_modes, self.local_modes)

    def unsqueeze(self, dims: int | Sequence[int]) -> RegisterLayout:
        """Insert extent-1 dims at positions ``dims`` of the result (as numpy's
        ``expand_dims``)."""
        raw = (dims,) if isinstance(dims, int) else tuple(dims)
        rank = self.ndim + len(raw)
        where = set(as_dims(raw, rank, "unsqueeze dims"))
        rest = iter(self.shape)
        shape = tuple(1 if d in where else next(rest) for d in range(rank))
        return RegisterLayout(shape, self.mode_shape, self.spatial_modes, self.local_modes)

    # ---- printing --------------------------------------------------------------------
    def __str__(self) -> str:
        return (fluent_spelling(self.ndim, self.mode_shape, self.mode_dims, self.spatial_modes,
                                self.local_modes) or self._field_form())

    def __repr__(self) -> str:
        return str(self)

    def _field_form(self) -> str:
        return (f"RegisterLayout(shape={self.shape}, mode_shape={self.mode_shape}, "
                f"spatial_modes={self.spatial_modes}, local_modes={self.local_modes})")


# ---- primitives ------------------------------------------------------------------------

def _primitive(shape: Sequence[int], spatial_major_first: bool, row_major: bool
               ) -> RegisterLayout:
    shape = as_shape(shape, "shape")
    order = tuple(range(len(shape)))
    order = order if row_major else order[::-1]
    return RegisterLayout(shape, shape, order if spatial_major_first else (),
                          () if spatial_major_first else order)


def local(*shape: int) -> RegisterLayout:
    """One thread holds the whole tile; local index = row-major index (last dim fastest)."""
    return _primitive(shape, spatial_major_first=False, row_major=True)


def spatial(*shape: int) -> RegisterLayout:
    """One element per thread; thread index = row-major index (last dim fastest)."""
    return _primitive(shape, spatial_major_first=True, row_major=True)


def column_local(*shape: int) -> RegisterLayout:
    """One thread holds the whole tile; local index = column-major index (first dim fastest)."""
    return _primitive(shape, spatial_major_first=False, row_major=False)


def column_spatial(*shape: int) -> RegisterLayout:
    """One element per thread; thread index = column-major index (first dim fastest)."""
    return _primitive(shape, spatial_major_first=True, row_major=False)


def replicated(n: int, ndim: int = 1) -> RegisterLayout:
    """``n`` threads all holding the one element of an all-ones tile of rank ``ndim``.

    As a factor of a product it adds a replication digit: ``spatial(8).replicated(4)`` is
    32 threads where threads ``4i .. 4i+3`` hold element ``i``; ``replicated(4).spatial(8)``
    puts the replication digit on the major side (thread ``t`` holds ``t % 8``).
    """
    n = as_int(n, "replication factor")
    ndim = as_int(ndim, "ndim")
    if n < 1 or ndim < 0:
        raise LayoutError(f"replicated(n={n}, ndim={ndim}): n must be >= 1 and ndim >= 0")
    return RegisterLayout((1,) * ndim, (), (-n,), ())


# ---- division and concatenation ------------------------------------------------------

class _NotALayout(Exception):
    """Internal: a function that no register layout computes."""


def _recover(shape: tuple[int, ...], num_threads: int, local_size: int,
             thread_fn: Callable[[int], tuple[int, ...]],
             local_fn: Callable[[int], tuple[int, ...]]) -> RegisterLayout:
    """The canonical layout of the function with ``f(t, 0) = thread_fn(t)`` and
    ``f(0, l) = local_fn(l)``, read digit by digit from the minor end (the module docstring's
    uniqueness argument). Raises `_NotALayout` when the function has no such structure; the
    result is only a candidate, which callers verify in full."""
    ndim = len(shape)
    modes: list[tuple[int, int, int, str, int]] = []  # (dim, stride, size, list, position)
    lists: dict[str, list[int | None]] = {"spatial": [], "local": []}  # minor -> major
    for name, count, fn in (("spatial", num_threads, thread_fn), ("local", local_size, local_fn)):
        if fn(0) != (0,) * ndim:
            raise _NotALayout(f"index 0 of the {name} digits does not map to the origin")
        base = 1
        while base < count:
            step = fn(base)
            moved = [d for d in range(ndim) if step[d] != 0]
            if len(moved) > 1 or (moved and step[moved[0]] < 0):
                raise _NotALayout(f"{name} index {base} maps to {step}, not a single digit step")
            k = 2
            while base * k < count and fn(base * k) == tuple(k * v for v in step):
                k += 1
            if count % (base * k):
                raise _NotALayout(f"{name} digit of size {k} at weight {base} does not divide "
                                  f"{count}")
            if moved:
                modes.append((moved[0], step[moved[0]], k, name, len(lists[name])))
                lists[name].append(None)
            else:
                lists[name].append(-k)
            base *= k
    ordered: list[tuple[int, int, int, str, int]] = []
    for d in range(ndim):
        mine = sorted((m for m in modes if m[0] == d), key=lambda m: m[1])
        stride = 1
        for m in mine:
            if m[1] != stride:
                raise _NotALayout(f"dim {d}: the digit steps {[x[1] for x in mine]} are not a "
                                  "mixed-radix system")
            stride *= m[2]
        if stride != shape[d]:
            raise _NotALayout(f"dim {d}: the digits cover {stride} of extent {shape[d]}")
        ordered += reversed(mine)
    for i, (_, _, _, name, pos) in enumerate(ordered):
        lists[name][pos] = i
    return RegisterLayout(shape, tuple(m[2] for m in ordered),
                          tuple(reversed(lists["spatial"])),  # type: ignore[arg-type]
                          tuple(reversed(lists["local"])))  # type: ignore[arg-type]


def _quotient_sizes(big: RegisterLayout, small: RegisterLayout, op: str
                    ) -> tuple[tuple[int, ...], int, int]:
    if not isinstance(big, RegisterLayout) or not isinstance(small, RegisterLayout):
        raise LayoutError(f"{op} takes two RegisterLayouts, got {big!r} and {small!r}")
    if big.ndim != small.ndim:
        raise LayoutError(f"{op} needs layouts of one rank: {big} has shape {big.shape}, "
                          f"{small} has shape {small.shape}")
    pairs = {"shape": (big.shape, small.shape),
             "num_threads": ((big.num_threads,), (small.num_threads,)),
             "local_size": ((big.local_size,), (small.local_size,))}
    for what, (x, y) in pairs.items():
        if any(a % b for a, b in zip(x, y)):
            raise LayoutError(f"{op}({big}, {small}): {what} {y} does not divide {x}")
    return (tuple(a // b for a, b in zip(big.shape, small.shape)),
            big.num_threads // small.num_threads, big.local_size // small.local_size)


def divide(a: RegisterLayout, b: RegisterLayout) -> RegisterLayout:
    """The layout ``r`` with ``r * b == a``, or `LayoutError` when there is none.

    ``r`` is unique when it exists: the product law at ``tB = lB = 0`` gives
    ``r(t, l) = a(t * b.num_threads, l * b.local_size) // b.shape``. That candidate is
    rebuilt as a layout and accepted only if ``r * b == a`` (canonical equality is
    equality of functions), so a wrong layout is never returned.
    """
    shape, nt, ls = _quotient_sizes(a, b, "divide")
    bt, bl, bs = b.num_threads, b.local_size, b.shape
    try:
        r = _recover(shape, nt, ls,
                     lambda x: tuple(c // s for c, s in zip(a.global_index(x * bt, 0), bs)),
                     lambda x: tuple(c // s for c, s in zip(a.global_index(0, x * bl), bs)))
    except _NotALayout as exc:
        raise LayoutError(f"{a} is not r * {b} for any layout r: {exc}") from None
    if r * b != a:
        raise LayoutError(f"{a} is not r * {b} for any layout r ({b} is not a right factor)")
    return r


def left_divide(c: RegisterLayout, a: RegisterLayout) -> RegisterLayout:
    """The layout ``b`` with ``a * b == c``, or `LayoutError` when there is none.

    ``b`` is ``c`` restricted to its first ``b.num_threads`` threads and ``b.local_size``
    locals (the product law at ``tA = lA = 0``), accepted only if ``a * b == c``.
    """
    shape, nt, ls = _quotient_sizes(c, a, "left_divide")
    try:
        b = _recover(shape, nt, ls, lambda x: c.global_index(x, 0),
                     lambda x: c.global_index(0, x))
    except _NotALayout as exc:
        raise LayoutError(f"{c} is not {a} * b for any layout b: {exc}") from None
    if a * b != c:
        raise LayoutError(f"{c} is not {a} * b for any layout b ({a} is not a left factor)")
    return b


def concat(a: RegisterLayout, b: RegisterLayout) -> RegisterLayout:
    """The rank ``a.ndim + b.ndim`` layout of shape ``a.shape + b.shape`` that holds
    ``a(tA, lA) + b(tB, lB)`` (coordinates concatenated) at thread ``tA * b.num_threads + tB``,
    local ``lA * b.local_size + lB``: ``a``'s digits are the major ones."""
    if not isinstance(a, RegisterLayout) or not isinstance(b, RegisterLayout):
        raise LayoutError(f"concat takes two RegisterLayouts, got {a!r} and {b!r}")
    k = len(a.mode_shape)

    def shift(entries: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(e if e < 0 else e + k for e in entries)

    return RegisterLayout(a.shape + b.shape, a.mode_shape + b.mode_shape,
                          a.spatial_modes + shift(b.spatial_modes),
                          a.local_modes + shift(b.local_modes))
