"""Argument checks shared by the functions of the kernel language (`vm.lang`): a tile of a
given memory space, a register tile, offsets, a layout for a tile's shape, a static
tile inside a static tensor, and the builder of the kernel being compiled. Each fails
with a `VMError` in the user's terms.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

from tilevm.ir.errors import VMError
from tilevm.ir.types import MemorySpace
from tilevm.vm import frontend_values as fv
from tilevm.vm.frontend_values import Scalar, Tile


def tile_in(value: Any, what: str, space: MemorySpace) -> Tile:
    if not isinstance(value, Tile):
        raise VMError(f"{what} must be a {space.value} tile, got {fv.describe(value)}")
    if value.space is not space:
        raise VMError(f"{what} must be a {space.value} tile, but {value} is in "
                      f"{value.space.value} memory")
    return value


def register_tile(value: Any, what: str) -> Tile:
    if isinstance(value, Tile):
        value.require_register(what)
        return value
    raise VMError(f"{what} must be a register tile, got {fv.describe(value)}")


def as_list(values: Any) -> list[Any]:
    if isinstance(values, (Scalar, numbers.Number)):
        return [values]
    try:
        return list(values)
    except TypeError:
        raise VMError(f"expected a list, got {fv.describe(values)}") from None


def offsets_of(offsets: Any, ndim: int, what: str) -> list[Any]:
    items = as_list(offsets)
    if len(items) != ndim:
        raise VMError(f"{what}: {len(items)} offset(s) for a {ndim}-d tensor")
    return [fv.to_expr(o, f"{what} offset {i}") for i, o in enumerate(items)]


def check_inside(offsets: list[Any], shape: Sequence[int], outer: Sequence[Any],
                  what: str) -> None:
    """A static tile at static offsets must lie inside a static tensor."""
    for i, (o, n, m) in enumerate(zip(offsets, shape, outer)):
        value = getattr(o, "value", None)
        if isinstance(value, int) and isinstance(m, int) and not 0 <= value <= m - n:
            raise VMError(f"{what}: the tile [{value}, {value + n}) in dimension {i} does not "
                          f"lie inside the tensor's {m}")


def builder_for(what: str) -> Any:
    return fv.current(what).builder
