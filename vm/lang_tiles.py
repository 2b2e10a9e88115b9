"""The arithmetic of the kernel language (`vm.lang`, `tv.*`): scalar helpers (`cdiv`,
`min`/`max` of scalars), elementwise math, reductions, and the register-tile
instructions (`full`, `zeros`, `arange`, `view`, `cast`, `where`, `dot`, `annotate_layout`,
`print`).

Naming: `tv.max(tile, dim)` / `tv.min` / `tv.sum` reduce over a dimension; `tv.max(a, b)`
on scalars is their maximum; the elementwise maximum of two tiles, or a tile and a
scalar, is `tv.maximum(a, b)` (`tv.minimum`).
"""

from __future__ import annotations

import builtins
import math
import numbers
from typing import Any

from tilevm import dtypes as _dtypes
from tilevm.ir.errors import VMError
from tilevm.ir.expr import BOOL, Select
from tilevm.ir.types import MemorySpace
from tilevm.vm import frontend_values as fv
from tilevm.vm.frontend_values import Scalar, Tile
from tilevm.vm.lang_args import builder_for, register_tile

F32, INT32 = _dtypes.parse("f32"), _dtypes.parse("int32")


# ---- scalars -----------------------------------------------------------------------------

def cdiv(a: Any, b: Any) -> Any:
    """`ceil(a / b)` for integers (Python ints give a Python int)."""
    for v in (a, b):
        if isinstance(v, Tile) or not (isinstance(v, Scalar) or isinstance(v, numbers.Integral)):
            raise VMError(f"tv.cdiv takes integers, got {fv.describe(v)}")
    if isinstance(a, numbers.Integral) and isinstance(b, numbers.Integral):
        return -(-int(a) // int(b))
    return fv.scalar_binary("cdiv", a, b)


def _scalar_minmax(op: str, a: Any, b: Any) -> Any:
    for v in (a, b):
        if not (isinstance(v, Scalar) or fv.is_number(v)):
            raise VMError(f"tv.{op} takes scalars, got {fv.describe(v)}")
    if fv.is_number(a) and fv.is_number(b):
        return builtins.max(a, b) if op == "max" else builtins.min(a, b)
    return fv.scalar_binary(op, a, b)


def _minmax(op: str, x: Any, y: Any, dim: Any, keepdim: bool) -> Any:
    if isinstance(x, Tile):
        d = y if dim is None else dim
        if d is None:
            raise VMError(f"tv.{op}(tile) needs the dimension to reduce: tv.{op}(x, dim)")
        if isinstance(d, bool) or not isinstance(d, numbers.Integral):
            raise VMError(f"tv.{op}(tile, dim) reduces over a dimension; the elementwise "
                          f"{op}imum of two values is tv.{op}imum(a, b)")
        return fv.reduce_tile(op, x, d, keepdim)
    if y is None:
        raise VMError(f"tv.{op} takes a tile and a dimension, or two scalars")
    if isinstance(y, Tile):
        raise VMError(f"the elementwise {op}imum of a tile is tv.{op}imum(a, b)")
    return _scalar_minmax(op, x, y)


def max(x: Any, y: Any = None, /, *, dim: Any = None, keepdim: bool = False) -> Any:
    """`tv.max(tile, dim)`: reduce over `dim`; `tv.max(a, b)` on scalars: the larger."""
    return _minmax("max", x, y, dim, keepdim)


def min(x: Any, y: Any = None, /, *, dim: Any = None, keepdim: bool = False) -> Any:
    """`tv.min(tile, dim)`: reduce over `dim`; `tv.min(a, b)` on scalars: the smaller."""
    return _minmax("min", x, y, dim, keepdim)


def sum(x: Any, dim: Any, keepdim: bool = False, layout: Any = None) -> Tile:
    """Sum a register tile over `dim` (floats accumulate in f32); `layout` asks for the
    result's layout (a `view` of the sum needs it)."""
    t = register_tile(x, "tv.sum")
    d = fv.static_int(dim, "the dimension of sum")
    if layout is not None and -t.ndim <= d < t.ndim:  # (reduce_tile reports a bad dim)
        shape = list(t.tensor.type.static_shape)
        shape[d % t.ndim:d % t.ndim + 1] = [1] if keepdim else []
        layout = fv.layout_for(layout, tuple(shape), MemorySpace.REGISTER, "tv.sum")
    return fv.reduce_tile("sum", t, d, keepdim, layout)


def maximum(a: Any, b: Any) -> Any:
    """Elementwise maximum (tiles broadcast; scalars allowed)."""
    if isinstance(a, Tile) or isinstance(b, Tile):
        return fv.tile_binary("max", a, b)
    return _scalar_minmax("max", a, b)


def minimum(a: Any, b: Any) -> Any:
    """Elementwise minimum (tiles broadcast; scalars allowed)."""
    if isinstance(a, Tile) or isinstance(b, Tile):
        return fv.tile_binary("min", a, b)
    return _scalar_minmax("min", a, b)


def fma(a: Any, b: Any, c: Any) -> Tile:
    """`a * b + c` with one rounding, elementwise on float tiles (tiles broadcast; scalars
    allowed; at least one operand a tile): the exact result rounded to the tiles' dtype,
    one `fma` instruction on the GPU where `a * b + c` is two roundings."""
    if not any(isinstance(v, Tile) for v in (a, b, c)):
        raise VMError("tv.fma works on tiles (at least one operand a tile); for scalars "
                      "write a * b + c")
    return fv.tile_fma(a, b, c)


def _unary(op: str, x: Any, py: Any) -> Any:
    if isinstance(x, Tile):
        return fv.tile_unary(op, x)
    if isinstance(x, Scalar):
        raise VMError(f"tv.{op} works on tiles and Python numbers, not on runtime scalars")
    if fv.is_number(x):
        return py(x)
    raise VMError(f"tv.{op} takes a tile, got {fv.describe(x)}")


def exp(x: Any) -> Any:
    return _unary("exp", x, math.exp)


def exp2(x: Any) -> Any:
    return _unary("exp2", x, lambda v: 2.0 ** v)


def log(x: Any) -> Any:
    return _unary("log", x, math.log)


def log2(x: Any) -> Any:
    return _unary("log2", x, math.log2)


def sqrt(x: Any) -> Any:
    return _unary("sqrt", x, math.sqrt)


def rsqrt(x: Any) -> Any:
    return _unary("rsqrt", x, lambda v: 1.0 / math.sqrt(v))


def abs(x: Any) -> Any:
    if isinstance(x, (Tile, Scalar)) or fv.is_number(x):
        return builtins.abs(x)
    raise VMError(f"tv.abs takes a tile or a scalar, got {fv.describe(x)}")


# ---- register tiles ----------------------------------------------------------------------

def full(shape: Any, value: Any, dtype: Any = None, layout: Any = None) -> Tile:
    """A register tile with every element `value` (a number or a runtime scalar)."""
    b = builder_for("tv.full")
    shape = fv.static_shape(shape, "tv.full shape")
    if isinstance(value, Tile) or not (isinstance(value, Scalar) or fv.is_number(value)):
        raise VMError(f"tv.full value must be a scalar, got {fv.describe(value)}")
    if dtype is None:
        dtype = value.dtype if isinstance(value, Scalar) else fv.number_expr(value).dtype
    dtype = fv.as_dtype(dtype, "tv.full dtype")
    expr = value.expr if isinstance(value, Scalar) else fv.number_expr(value, dtype)
    layout = fv.layout_for(layout, shape, MemorySpace.REGISTER, "tv.full")
    return Tile(b.full(expr, dtype, shape, layout))


def zeros(shape: Any, dtype: Any = F32, layout: Any = None) -> Tile:
    return full(shape, 0, dtype, layout)


def arange(shape: Any, dim: Any = None, dtype: Any = INT32, layout: Any = None) -> Tile:
    """An index tile: the register tile of `shape` whose element at `(i0, i1, ...)` is
    its index along `dim`, `i_dim` (`tv.arange(n)`: `0, 1, ..., n - 1`). `dim` may be
    omitted for a 1-d shape; `dtype` is an integer type that holds `shape[dim] - 1`. Masks
    come from it by broadcasting arithmetic: `tv.arange([m, n], 1) + k0 <= tv.arange([m,
    n], 0) + q0` is a causal mask, `tv.arange([1, n], 1) + k0 < S` the keys before S."""
    b = builder_for("tv.arange")
    shape = fv.static_shape(shape, "tv.arange shape")
    if dim is None:
        if len(shape) != 1:
            raise VMError(f"tv.arange of the {len(shape)}-d shape {list(shape)} needs the "
                          "dimension whose index it holds: tv.arange(shape, dim)")
        dim = 0
    d = fv.static_int(dim, "tv.arange dim")
    if not -len(shape) <= d < len(shape):
        raise VMError(f"tv.arange: dimension {d} is out of range for the {len(shape)}-d "
                      f"shape {list(shape)}")
    d %= len(shape)
    dtype = fv.as_dtype(dtype, "tv.arange dtype")
    if not dtype.is_integer:
        raise VMError(f"tv.arange makes an integer tile, got dtype {dtype}; convert it "
                      f"afterwards: tv.cast(tv.arange(...), {dtype})")
    if shape[d] - 1 > dtype.max:
        raise VMError(f"tv.arange: {dtype} does not hold the index {shape[d] - 1} of "
                      f"dimension {d}")
    layout = fv.layout_for(layout, shape, MemorySpace.REGISTER, "tv.arange")
    return Tile(b.arange(d, dtype, shape, layout))


def view(x: Any, dtype: Any, shape: Any, layout: Any) -> Tile:
    """Reinterpret the bits each thread holds as `dtype` elements under `layout`
    (legal iff the bits per thread are preserved)."""
    builder_for("tv.view")
    return register_tile(x, "tv.view").view(dtype, shape, layout)


def cast(x: Any, dtype: Any, layout: Any = None, *, exponent: int = 0) -> Any:
    """Convert a tile's elements (round to nearest even, saturating) or a scalar. With
    `exponent`, 1..8-bit codes convert to `value * 2^exponent` (a float `dtype`): where
    it cancels the power of two of a low-bit float's conversion rule, the conversion
    needs no float operation, and the kernel applies 2^-exponent later (e.g. to a scale
    in f32)."""
    target = fv.as_dtype(dtype, "tv.cast dtype")
    if isinstance(x, Tile):
        t = register_tile(x, "tv.cast")
        layout = fv.layout_for(layout, t.tensor.type.static_shape, MemorySpace.REGISTER, "tv.cast")
        return t.to(target, layout, exponent=fv.static_int(exponent, "tv.cast exponent"))
    if exponent:
        raise VMError("tv.cast exponent takes a tile of 1..8-bit codes")
    if isinstance(x, Scalar):
        return x.to(target)
    if fv.is_number(x):
        return Scalar(fv.number_expr(x)).to(target)
    raise VMError(f"tv.cast takes a tile or a scalar, got {fv.describe(x)}")


def where(cond: Any, x: Any, y: Any) -> Any:
    """`x` where `cond` holds, else `y`, elementwise (scalars broadcast). With a runtime
    scalar condition and scalar values, a scalar select."""
    for v in (x, y):
        if not isinstance(v, (Tile, Scalar)) and not fv.is_number(v):
            raise VMError(f"tv.where values must be tiles or scalars, got {fv.describe(v)}")
    tiles = [v for v in (cond, x, y) if isinstance(v, Tile)]
    if not tiles:
        if isinstance(cond, Scalar):
            return Scalar(Select(fv.to_bool_expr(cond), fv.to_expr(x), fv.to_expr(y)))
        return x if cond else y
    b = builder_for("tv.where")
    for v in tiles:
        v.require_register("tv.where")
    values = [v for v in (x, y) if isinstance(v, Tile)]
    if len(values) == 2 and values[0].dtype != values[1].dtype:
        raise VMError(f"tv.where values have different dtypes ({values[0].dtype} and "
                      f"{values[1].dtype}); convert one with .to(dtype)")
    shape = fv.broadcast_shapes([v.tensor.type.static_shape for v in tiles])
    if isinstance(cond, Tile):
        if cond.dtype != BOOL:
            raise VMError(f"tv.where condition must be a bool tile (a comparison), got "
                          f"{cond.dtype}")
        cond_t = cond.tensor
    else:
        cond_t = b.full(fv.to_bool_expr(cond), BOOL, shape)
    args = [v.tensor if isinstance(v, Tile) else fv.to_expr(v) for v in (x, y)]
    return Tile(b.where(cond_t, *args))


def dot(a: Any, b: Any, c: Any = None, *, layout: Any = None) -> Tile:
    """`a @ b + c` (c defaults to f32 zeros): products and sums in f32.

    `b` may be a whole shared tile instead of a register tile: the tensor cores then read
    it from shared memory themselves (`wgmma` on sm_90a; see docs/language.md), and so
    may `a` when `b` is one. A shared `b` of shape [g, k, n] holds g matrices: the rows
    of `a` and `c` form g blocks, block i multiplied by `b[i]`."""
    builder = builder_for("tv.dot")
    shared_b = isinstance(b, Tile) and b.space is MemorySpace.SHARED
    if shared_b and isinstance(a, Tile) and a.space is MemorySpace.SHARED:
        ta = a
    else:  # (a shared a needs a shared b: the tensor cores read both, or neither)
        ta = register_tile(a, "tv.dot a (with a register b)" if isinstance(a, Tile) and
                       a.space is MemorySpace.SHARED else "tv.dot a")
    if shared_b:
        tb = b
    else:
        tb = register_tile(b, "tv.dot b (a register or shared tile)")
    grouped = shared_b and tb.ndim == 3
    if ta.ndim != 2 or tb.ndim != 2 and not grouped:
        raise VMError(f"tv.dot multiplies 2-d tiles (b may be a shared [g, k, n]), got "
                      f"shapes {list(ta.shape)} and {list(tb.shape)}")
    (m, k), (k2, n) = ta.shape, tb.shape[-2:]
    if grouped and m % tb.shape[0]:
        raise VMError(f"tv.dot: a's {m} rows do not split into b's {tb.shape[0]} blocks")
    if k != k2:
        raise VMError(f"tv.dot: shapes {[m, k]} and {[k2, n]} do not multiply")
    if c is None:
        c = zeros([m, n], F32)
    tc = register_tile(c, "tv.dot c")
    if list(tc.shape) != [m, n]:
        raise VMError(f"tv.dot: the accumulator has shape {list(tc.shape)}, expected {[m, n]}")
    layout = fv.layout_for(layout, (m, n), MemorySpace.REGISTER, "tv.dot")
    return Tile(builder.dot(ta.tensor, tb.tensor, tc.tensor, layout))


def annotate_layout(x: Any, layout: Any) -> Any:
    """Ask layout inference to give `x` this layout; returns `x`."""
    b = builder_for("tv.annotate_layout")
    if not isinstance(x, Tile) or x.space is MemorySpace.GLOBAL:
        raise VMError(f"tv.annotate_layout takes a register or shared tile, got "
                      f"{fv.describe(x)}")
    if layout is None:
        raise VMError("tv.annotate_layout needs a layout")
    layout = fv.layout_for(layout, x.tensor.type.static_shape, x.space, "tv.annotate_layout")
    b.annotate_layout(x.tensor, layout)
    return x


def print(*args: Any) -> None:
    """Debug print (block 0): `tv.print(value)` or `tv.print("message", value)`."""
    b = builder_for("tv.print")
    if len(args) == 2 and isinstance(args[0], str):
        message, value = args
    elif len(args) == 1:
        message, value = "", args[0]
    else:
        raise VMError("tv.print takes a value, or a message and a value")
    if isinstance(value, Tile):
        b.print(value.tensor, message)
    else:
        b.print(fv.to_expr(value, "tv.print value"), message)
