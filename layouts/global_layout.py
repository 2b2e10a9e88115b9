"""`GlobalLayout`: a strided view over global memory, with sizes known only at run time.

Shape and strides are counted in *elements*; each entry is an int or a symbolic
`Expr` (`Sym("M")`, `Sym("K") * 2`, ...) that the launch binds. Element `c` sits at

    offset(c) = sum_i c[i] * strides[i]

which is an int when everything is known and an `Expr` otherwise. Static entries are
stored as plain ints (a constant `Expr` is turned into its int), so a fully static
layout holds no `Expr` at all. Strides may be negative or zero (reversed or
broadcast views); static extents must be >= 1, symbolic extents are assumed >= 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tilevm.layouts.errors import LayoutError
from tilevm.layouts.symbolic import Expr, as_expr, free_symbols, simplify

SizeLike = Expr | int


def _sizes(values: Sequence[SizeLike], what: str) -> tuple[SizeLike, ...]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, Expr)):
            raise LayoutError(f"{what} must hold ints or symbolic Exprs, got {v!r}")
        out.append(simplify(v))
    return tuple(out)


def _dense_strides(shape: Sequence[SizeLike]) -> tuple[SizeLike, ...]:
    strides: list[SizeLike] = []
    step: SizeLike = 1
    for n in reversed(shape):
        strides.append(step)
        step = simplify(as_expr(step) * n)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class GlobalLayout:
    """Shape and strides in elements; entries are ints or symbolic `Expr`s."""

    shape: tuple[SizeLike, ...]
    strides: tuple[SizeLike, ...]

    def __post_init__(self) -> None:
        shape = _sizes(self.shape, "shape")
        strides = _sizes(self.strides, "strides")
        if len(shape) != len(strides):
            raise LayoutError(f"shape {_fmt(shape)} and strides {_fmt(strides)} differ in rank")
        for n in shape:
            if isinstance(n, int) and n < 1:
                raise LayoutError(f"shape {_fmt(shape)}: every static extent must be >= 1")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "strides", strides)

    # ---- constructors ------------------------------------------------------------------
    @classmethod
    def row_major(cls, shape: Sequence[SizeLike]) -> GlobalLayout:
        """Dense, last dimension contiguous."""
        shape = _sizes(shape, "shape")
        return cls(shape, _dense_strides(shape))

    @classmethod
    def column_major(cls, shape: Sequence[SizeLike]) -> GlobalLayout:
        """Dense, first dimension contiguous."""
        shape = _sizes(shape, "shape")
        return cls(shape, _dense_strides(shape[::-1])[::-1])

    @classmethod
    def strided(cls, shape: Sequence[SizeLike], strides: Sequence[SizeLike]) -> GlobalLayout:
        return cls(tuple(shape), tuple(strides))

    def __str__(self) -> str:
        return f"GlobalLayout({_fmt(self.shape)}:{_fmt(self.strides)})"

    # ---- queries -----------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def free_symbols(self) -> frozenset[str]:
        return free_symbols(self.shape + self.strides)

    @property
    def is_static(self) -> bool:
        return not self.free_symbols

    @property
    def num_elements(self) -> SizeLike:
        return simplify(math.prod((as_expr(n) for n in self.shape), start=as_expr(1)))

    def offset(self, coord: Sequence[SizeLike]) -> SizeLike:
        """Element offset of `coord` (ints or Exprs): an int when all is known.

        Static coordinates are checked against static extents.
        """
        coord = _sizes(coord, "a coordinate")
        if len(coord) != self.rank:
            raise LayoutError(f"coordinate {_fmt(coord)} has rank {len(coord)}, layout {self} "
                              f"has rank {self.rank}")
        for c, n in zip(coord, self.shape, strict=True):
            if isinstance(c, int) and (c < 0 or (isinstance(n, int) and c >= n)):
                raise LayoutError(f"coordinate {_fmt(coord)} is outside shape {_fmt(self.shape)}")
        total = as_expr(0)
        for c, s in zip(coord, self.strides, strict=True):
            total = total + as_expr(c) * s
        return simplify(total)

    def evaluate(self, bindings: Mapping[str, int]) -> GlobalLayout:
        """The static layout once the runtime sizes in `bindings` are known."""
        def value(v: SizeLike) -> int:
            return v if isinstance(v, int) else v.evaluate(bindings)
        return GlobalLayout(tuple(map(value, self.shape)), tuple(map(value, self.strides)))

    def subs(self, bindings: Mapping[str, SizeLike]) -> GlobalLayout:
        """Bind some symbols (to ints or Exprs); the others stay symbolic."""
        def value(v: SizeLike) -> SizeLike:
            return v if isinstance(v, int) else simplify(v.subs(bindings))
        return GlobalLayout(tuple(map(value, self.shape)), tuple(map(value, self.strides)))


def _fmt(values: Sequence[SizeLike]) -> str:
    inner = ", ".join(str(v) for v in values)
    return f"({inner},)" if len(values) == 1 else f"({inner})"
