"""Types of VM values: pointers (kernel parameters) and tensors in three memory spaces.

A tensor is a named value with a `TensorType`: its memory space, element type, shape
and layout.

- `GLOBAL`: a view over a pointer; its shape and strides are scalar expressions
  (runtime sizes); loads and stores through it are bounds-checked against its shape
  (that is how ragged edges are masked).
- `SHARED`: a static-shape tile in the block's shared memory with a `SharedLayout`.
- `REGISTER`: a static-shape tile distributed over the block's threads by a
  `RegisterLayout`. A register tensor may have no layout yet (`layout=None`): layout
  inference chooses one; instructions whose meaning depends on the layout (`view`)
  need it given.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from tilevm.dtypes import DataType
from tilevm.ir.expr import Expr, format_expr


class MemorySpace(Enum):
    GLOBAL = "global"
    SHARED = "shared"
    REGISTER = "register"


@dataclass(frozen=True)
class PointerType:
    """A pointer to global memory holding elements of `dtype`. Sub-byte element types
    mean densely bit-packed data (element i at bits [i*b, (i+1)*b) from the pointer)."""

    dtype: DataType
    readonly: bool = False

    def __str__(self) -> str:
        return f"{'const ' if self.readonly else ''}ptr<{self.dtype}>"


def broadcast_shapes(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    """numpy's broadcast of static shapes (trailing dimensions aligned, 1 stretches), or
    None if they do not broadcast. The builder, the frontend and the verifier all use it."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        padded = (1,) * (ndim - len(shape)) + tuple(shape)
        for i, n in enumerate(padded):
            if n != 1:
                if out[i] not in (1, n):
                    return None
                out[i] = n
    return tuple(out)


@dataclass(frozen=True)
class Pointer:
    """A pointer kernel parameter."""

    name: str
    type: PointerType

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class TensorType:
    space: MemorySpace
    dtype: DataType
    shape: tuple[int | Expr, ...]
    layout: Any = None  # RegisterLayout | SharedLayout | None; global views keep strides

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def static_shape(self) -> tuple[int, ...]:
        """The shape as ints (register and shared tensors always have one)."""
        if not all(isinstance(s, int) for s in self.shape):
            raise TypeError(f"tensor shape {self.shape} is not static")
        return tuple(int(s) for s in self.shape)  # type: ignore[arg-type]

    @property
    def num_elements(self) -> int:
        n = 1
        for s in self.static_shape:
            n *= s
        return n

    def with_layout(self, layout: Any) -> TensorType:
        return TensorType(self.space, self.dtype, self.shape, layout)

    def __str__(self) -> str:
        return format_type(self)


def format_type(t: TensorType) -> str:
    """A tensor type in the IR text form: `SPACE<DTYPE>[DIM, ...] {LAYOUT}`."""
    dims = ", ".join(str(d) if isinstance(d, int) else format_expr(d) for d in t.shape)
    text = f"{t.space.value}<{t.dtype}>[{dims}]"
    return text if t.layout is None else f"{text} {{{t.layout}}}"


@dataclass(frozen=True)
class Tensor:
    """A tensor value. Names are unique within a program (the builder sees to it)."""

    name: str
    type: TensorType

    @property
    def space(self) -> MemorySpace:
        return self.type.space

    @property
    def dtype(self) -> DataType:
        return self.type.dtype

    @property
    def shape(self) -> tuple[int | Expr, ...]:
        return self.type.shape

    @property
    def layout(self) -> Any:
        return self.type.layout

    def __str__(self) -> str:
        return f"%{self.name}"
