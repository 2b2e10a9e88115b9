"""The canonical form of a `RegisterLayout`'s fields (`tilevm.layouts.register_layout`):
the checks of field values and the normalization every layout goes through on
construction.

Canonical form
--------------
Every layout is normalized on construction (``__post_init__``), so that two layouts are
``==`` (and hash alike) exactly when their shapes, thread counts, local sizes and
``(thread, local) -> coordinate`` tables are equal:

1. modes of size 1 and replication factors of 1 are dropped;
2. two modes of one dimension that are adjacent in that dimension (major then minor) *and*
   adjacent in the same list in the same order are merged into one;
3. adjacent replication entries are merged.

Why maximal merging is unique: call a pair as in rule 2 a *link*. Merging a link keeps
every other link (the merged mode has the major mode's predecessors and the minor mode's
successors, in its dimension and in its list) and creates none (a new link through the
merged mode was already a link of one of its parts). So maximal merging contracts exactly
the links present at the start, whatever the order.

Why the canonical form is determined by the function: read the thread index's digits
from the minor end. If the minor-most digit is a replication ``r``, then ``f(t) = f(0)`` for
``t < r`` and ``f(r) != f(0)`` (the next digit is a mode, by rule 3). If it is a mode of
size ``n`` in dim ``d`` with in-dimension stride ``s``, then ``f(t) = t * s * e_d`` for
``t < n``, and ``f(n)`` differs from ``n * s * e_d``: the only mode of dim ``d`` with stride
``n * s`` is the one right above it in the dimension, and were it the next digit of the
list, rule 2 would have merged the two. So the size, dimension and stride of every digit
can be read off the function, then the next digit from ``f`` on multiples of ``n``, and so
on; the same holds for the local index. The strides sort each dimension's modes, which
fixes ``mode_shape`` and both lists. `RegisterLayout.from_table` is this argument run as an
algorithm, and the property tests check ``from_table(L.table()) == L``.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Sequence

from tilevm.layouts.errors import LayoutError

# ---- input checking --------------------------------------------------------------------

def as_int(value: object, what: str) -> int:
    """`value` as a Python int; bools and non-integers are refused (a `True` extent is a bug)."""
    if isinstance(value, bool):
        raise LayoutError(f"{what} must be an int, got {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise LayoutError(f"{what} must be an int, got {value!r}") from None


def as_ints(values: object, what: str) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise LayoutError(f"{what} must be a sequence of ints, got {values!r}")
    return tuple(as_int(v, f"every entry of {what}") for v in values)


def as_shape(values: object, what: str) -> tuple[int, ...]:
    shape = as_ints(values, what)
    bad = [d for d, s in enumerate(shape) if s < 1]
    if bad:
        raise LayoutError(f"{what} {shape}: extents must be positive ints (dims {bad} are not)")
    return shape


def as_dims(dims: int | Sequence[int], ndim: int, what: str) -> tuple[int, ...]:
    """Dimension indices (negative ones count from the end), each in range and distinct."""
    raw = (dims,) if isinstance(dims, int) and not isinstance(dims, bool) else dims
    out = []
    for d in as_ints(raw, what):
        if not -ndim <= d < ndim:
            raise LayoutError(f"{what} {tuple(raw)}: dim {d} is out of range for rank {ndim}")
        out.append(d % ndim)
    if len(set(out)) != len(out):
        raise LayoutError(f"{what} {tuple(raw)} names a dimension twice")
    return tuple(out)


# ---- canonical form ----------------------------------------------------------------------

def derive_mode_dims(shape: tuple[int, ...], mode_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The dimension of every mode: dim d owns the shortest run of modes multiplying to
    shape[d]. Size-1 modes are ambiguous, but they are dropped, so any valid guess will do."""
    ndim = len(shape)
    dims: list[int] = []
    d, acc = 0, 1
    for size in mode_shape:
        if size == 1:
            dims.append(min(d, ndim - 1))
            continue
        while d < ndim and acc == shape[d]:
            d, acc = d + 1, 1
        if d == ndim or shape[d] % (acc * size):
            raise LayoutError(f"mode_shape {mode_shape} does not split shape {shape} dim by dim "
                              "(the modes of dim 0, then dim 1, ...; each dim's modes multiply "
                              "to its extent)")
        dims.append(d)
        acc *= size
    while d < ndim and acc == shape[d]:
        d, acc = d + 1, 1
    if d != ndim:
        raise LayoutError(f"mode_shape {mode_shape} does not split shape {shape} dim by dim: "
                          f"the modes run out before dim {d} (extent {shape[d]}) is covered")
    return tuple(dims)


def canonical_form(shape: tuple[int, ...], mode_shape: tuple[int, ...],
                   spatial_modes: tuple[int, ...], local_modes: tuple[int, ...]
                   ) -> tuple[tuple[int, ...], ...]:
    """Check the fields and return (mode_shape, spatial_modes, local_modes) in canonical form."""
    nmodes = len(mode_shape)
    mode_dims = derive_mode_dims(shape, mode_shape)
    if any(m < 0 for m in local_modes):
        raise LayoutError(f"local_modes {local_modes}: replication (a negative entry) is only "
                          "allowed among spatial_modes")
    used = [m for m in spatial_modes if m >= 0] + list(local_modes)
    if sorted(used) != list(range(nmodes)):
        raise LayoutError(f"spatial_modes {spatial_modes} and local_modes {local_modes} must "
                          f"name every mode 0..{nmodes - 1} of mode_shape {mode_shape} "
                          "exactly once")

    # 1. drop size-1 modes and factor-1 replication, renumbering the modes that stay
    kept = [m for m in range(len(mode_shape)) if mode_shape[m] > 1]
    index = {m: i for i, m in enumerate(kept)}
    dims = [mode_dims[m] for m in kept]
    nmodes = len(kept)
    spatial_list = [index[m] if m >= 0 else m for m in spatial_modes
                    if m < -1 or m in index]
    local_list = [index[m] for m in local_modes if m in index]
    # 2. contract the links: runs m, m+1, ... of one dim, consecutive in one list.
    # A run's modes are consecutive in mode_shape, so the merged mode takes the first's slot.
    head = list(range(nmodes))  # the mode each mode is merged into
    for lst in (spatial_list, local_list):
        for a, b in itertools.pairwise(lst):
            if a >= 0 and b == a + 1 and dims[a] == dims[b]:
                head[b] = head[a]
    sizes = [1] * nmodes
    for m in range(nmodes):
        sizes[head[m]] *= mode_shape[kept[m]]
    survivors = [m for m in range(nmodes) if head[m] == m]
    renumber = {m: i for i, m in enumerate(survivors)}

    def relist(lst: list[int]) -> tuple[int, ...]:
        out: list[int] = []
        for m in lst:
            if m < 0:
                # 3. merge adjacent replication entries
                if out and out[-1] < 0:
                    out[-1] = -(out[-1] * m)
                else:
                    out.append(m)
            elif head[m] == m:
                out.append(renumber[m])
        return tuple(out)

    return tuple(sizes[m] for m in survivors), relist(spatial_list), relist(local_list)
