"""The values a kernel's Python code computes with while it is compiled.

- `Scalar` wraps a scalar `ir.expr.Expr` (a kernel argument, `block_idx`, a loop
  variable, arithmetic on them): a value known only when the kernel runs. Python
  operators build expressions; Python numbers mix in freely.
- `Tile` wraps an `ir.types.Tensor` (global view, shared tile or register tile).
  Arithmetic and comparisons on register tiles emit `elementwise` instructions (numpy
  broadcasting; scalars and Python numbers broadcast to every element).

Neither may become a Python `bool`, `int` or index: those questions have no answer at
compile time, and a silent wrong answer would compile the wrong program.

The active compilation (`BuildContext`) is kept on a module-level stack; every function
that emits an instruction finds it with `current()`, which fails with a clear error
when no kernel is being compiled.
"""

from __future__ import annotations

import numbers
import os
import sys
from typing import Any

from tilevm.dtypes import DataType, DTypeError, parse
from tilevm.dtypes.constants import literal_value
from tilevm.ir.builder import Builder
from tilevm.ir.errors import SourceLoc, VMError
from tilevm.ir.expr import BOOL, INT32, Binary, Const, Expr, ScalarCast, Select, Unary, const
from tilevm.ir.types import MemorySpace, Tensor
from tilevm.ir.types import broadcast_shapes as ir_broadcast_shapes
from tilevm.layouts import RegisterLayout, SharedLayout, parse_layout

BOOL_MESSAGE = ("a runtime value cannot be a Python bool; use tv.where or a runtime if "
                "(on runtime values write & | ~ for and/or/not, tv.min/tv.max for min/max)")
INT_MESSAGE = ("a runtime value cannot be used as a Python int (it is known only when the "
               "kernel runs); tile shapes, dims and compile-time loops need Python ints")


# ---- the active compilation --------------------------------------------------------------

class BuildContext:
    """What the functions of `tv` need from the compilation in progress."""

    def __init__(self, builder: Builder, file: str, codes: set[Any]) -> None:
        self.builder = builder
        self.file = file
        self.codes = codes  # code objects compiled from the kernel's source

    def runtime_construct(self) -> str | None:
        """A description of the innermost runtime loop/if being built, or None."""
        return None

    def refresh_loc(self) -> None:
        """Point `builder.loc` at the kernel line running now (the innermost frame
        executing code compiled from the kernel's source), so that the pieces of a
        statement spanning several lines get their own line."""
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code in self.codes:
                self.builder.loc = SourceLoc(self.file, frame.f_lineno)
                return
            frame = frame.f_back


_ACTIVE: list[BuildContext] = []
# The frontend and the parts below it: a frame in these is never the user's code
# (kernels/ and examples/ are users of the frontend).
_LIBRARY = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                              part) + os.sep for part in ("dtypes", "layouts", "ir", "vm"))


def caller_loc() -> SourceLoc | None:
    """The innermost line of the user's code on the Python stack (the first frame
    outside the frontend): where an error found outside a kernel's compilation (a
    `tv.ptr` annotation, a misused kernel object) points."""
    frame = sys._getframe(1)
    while frame is not None:
        file = frame.f_code.co_filename
        if not file.startswith(_LIBRARY):
            return SourceLoc(file, frame.f_lineno)
        frame = frame.f_back
    return None


def at_caller(err: VMError) -> VMError:
    """`err` pointing at the user's calling line, if it points at none yet."""
    if err.loc is not None:
        return err
    return VMError(err.message, err.instruction, caller_loc())


def current(what: str) -> BuildContext:
    """The compilation in progress; `what` names the caller for the error message."""
    if not _ACTIVE:
        raise VMError(f"{what} can only be used inside a @tv.kernel function, while the "
                      "kernel is compiled (kernel.specialize(...) or kernel.interpret(...))",
                      loc=caller_loc())
    ctx = _ACTIVE[-1]
    ctx.refresh_loc()
    return ctx


def push(ctx: BuildContext) -> None:
    _ACTIVE.append(ctx)


def pop(ctx: BuildContext) -> None:
    assert _ACTIVE and _ACTIVE[-1] is ctx
    _ACTIVE.pop()


# ---- conversions -------------------------------------------------------------------------

def as_dtype(value: Any, what: str = "dtype") -> DataType:
    if isinstance(value, DataType):
        return value
    if isinstance(value, str):
        try:
            return parse(value)
        except DTypeError as e:
            raise VMError(f"{what}: {e}") from None
    raise VMError(f"{what} must be a data type (tv.f16, tv.int4, 'f6e3m2', ...), "
                  f"got {describe(value)}")


def is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (Scalar, Tile))


def number_expr(value: Any, dtype: DataType | None = None) -> Const:
    """A Python number as a constant (of `dtype` when given), checked here, at the user's
    line, by the rule every constant follows (`dtypes.constants.literal_value`)."""
    if isinstance(value, bool) or (dtype == BOOL and value in (0, 1)):
        return const(bool(value), dtype or BOOL)
    if isinstance(value, numbers.Integral):
        value = int(value)
        if dtype is None:
            dtype = INT32 if -2**31 <= value < 2**31 else parse("int64")
        literal = literal_checked(value, dtype)
        if dtype.is_float:  # the int as a float; one beyond float64 as the value it holds
            value = float(value) if abs(value) < 2**1000 else float(literal)
        return const(value, dtype)
    value = float(value)
    if dtype is not None and not dtype.is_float:
        raise VMError(f"the float {value!r} cannot become a {dtype} value")
    if dtype is not None:
        literal_checked(value, dtype)
    return const(value, dtype)


def literal_checked(value: int | float, dtype: DataType) -> int | float:
    """The value the literal `value` holds as a `dtype` constant, or a `VMError`."""
    try:
        return literal_value(value, dtype)
    except DTypeError as err:
        raise VMError(f"the constant {value!r} {err}") from None


def to_expr(value: Any, what: str = "value") -> Expr:
    """A `Scalar` or a Python number as an expression."""
    if isinstance(value, Scalar):
        return value.expr
    if isinstance(value, Expr):
        return value
    if is_number(value):
        return number_expr(value)
    if isinstance(value, Tile):
        raise VMError(f"{what} must be a scalar, got the tile {value}")
    raise VMError(f"{what} must be a scalar (a runtime value or a Python number), "
                  f"got {describe(value)}")


def to_bool_expr(value: Any) -> Expr:
    expr = to_expr(value, "a condition")
    if expr.dtype == BOOL:
        return expr
    return Binary("!=", expr, number_expr(0, expr.dtype))


def static_int(value: Any, what: str) -> int:
    """A compile-time int (tile sizes, dims, counts)."""
    if isinstance(value, Scalar):
        raise VMError(f"{what} must be a compile-time int, got a runtime value ({value.expr})")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise VMError(f"{what} must be an int, got {describe(value)}")
    return int(value)


def static_shape(shape: Any, what: str = "shape") -> tuple[int, ...]:
    if isinstance(shape, (Scalar, numbers.Integral)):
        shape = [shape]
    try:
        dims = list(shape)
    except TypeError:
        raise VMError(f"{what} must be a list of ints, got {describe(shape)}") from None
    out = tuple(static_int(d, f"{what}[{i}]") for i, d in enumerate(dims))
    for i, d in enumerate(out):
        if d <= 0:
            raise VMError(f"{what}[{i}] must be positive, got {d}")
    return out


def describe(value: Any) -> str:
    if isinstance(value, (Scalar, Tile)):
        return repr(value)
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def layout_for(layout: Any, shape: tuple[int, ...], space: MemorySpace, what: str) -> Any:
    """`layout` (a layout object or its text) checked for a tile of `shape` in `space`;
    None stays None (inference chooses)."""
    if layout is None:
        return None
    if isinstance(layout, str):
        layout = parse_layout(layout)
    kind = RegisterLayout if space is MemorySpace.REGISTER else SharedLayout
    if not isinstance(layout, kind):
        raise VMError(f"{what}: a {space.value} tile needs a {kind.__name__}, got "
                      f"{describe(layout)}")
    if tuple(layout.shape) != tuple(shape):
        raise VMError(f"{what}: the layout {layout} covers shape {list(layout.shape)}, "
                      f"the tile has shape {list(shape)}")
    return layout


# ---- Scalar -----------------------------------------------------------------------------------

_BOOL_OPS = {"&": "and", "|": "or", "^": "!="}


class Scalar:
    """A runtime scalar: an expression evaluated per thread block when the kernel runs."""

    __slots__ = ("expr",)

    def __init__(self, expr: Expr) -> None:
        self.expr = expr

    @property
    def dtype(self) -> DataType:
        return self.expr.dtype

    def to(self, dtype: DataType | str) -> Scalar:
        target = as_dtype(dtype)
        return self if target == self.dtype else Scalar(ScalarCast(self.expr, target))

    def __repr__(self) -> str:
        return f"Scalar({self.expr}: {self.dtype})"

    def __bool__(self) -> bool:
        raise VMError(BOOL_MESSAGE)

    def __index__(self) -> int:
        raise VMError(INT_MESSAGE)

    def __int__(self) -> int:
        raise VMError(INT_MESSAGE)

    def __float__(self) -> float:
        raise VMError(INT_MESSAGE.replace("Python int", "Python float"))

    def __iter__(self):
        raise VMError("a runtime scalar cannot be iterated over")

    __hash__ = None  # type: ignore[assignment]  # == builds an expression
    __array_ufunc__ = None  # numpy scalars defer to our reflected operators

    # arithmetic
    def __add__(self, o): return _binop("+", self, o)
    def __radd__(self, o): return _binop("+", o, self)
    def __sub__(self, o): return _binop("-", self, o)
    def __rsub__(self, o): return _binop("-", o, self)
    def __mul__(self, o): return _binop("*", self, o)
    def __rmul__(self, o): return _binop("*", o, self)
    def __truediv__(self, o): return _binop("/", self, o)
    def __rtruediv__(self, o): return _binop("/", o, self)
    def __floordiv__(self, o): return _binop("//", self, o)
    def __rfloordiv__(self, o): return _binop("//", o, self)
    def __mod__(self, o): return _binop("%", self, o)
    def __rmod__(self, o): return _binop("%", o, self)
    def __and__(self, o): return _binop("&", self, o)
    def __rand__(self, o): return _binop("&", o, self)
    def __or__(self, o): return _binop("|", self, o)
    def __ror__(self, o): return _binop("|", o, self)
    def __xor__(self, o): return _binop("^", self, o)
    def __rxor__(self, o): return _binop("^", o, self)
    def __lshift__(self, o): return _binop("<<", self, o)
    def __rlshift__(self, o): return _binop("<<", o, self)
    def __rshift__(self, o): return _binop(">>", self, o)
    def __rrshift__(self, o): return _binop(">>", o, self)
    # comparisons (reflected forms are handled by Python swapping the operator)
    def __lt__(self, o): return _binop("<", self, o)
    def __le__(self, o): return _binop("<=", self, o)
    def __gt__(self, o): return _binop(">", self, o)
    def __ge__(self, o): return _binop(">=", self, o)
    def __eq__(self, o): return _binop("==", self, o)  # type: ignore[override]
    def __ne__(self, o): return _binop("!=", self, o)  # type: ignore[override]

    def __neg__(self) -> Scalar:
        return Scalar(Unary("-", self.expr))

    def __pos__(self) -> Scalar:
        return self

    def __invert__(self) -> Scalar:
        return Scalar(Unary("not" if self.dtype == BOOL else "~", self.expr))

    def __abs__(self) -> Scalar:
        zero = number_expr(0, self.dtype)
        return Scalar(Select(Binary("<", self.expr, zero), Unary("-", self.expr), self.expr))


def _binop(op: str, a: Any, b: Any) -> Any:
    if isinstance(a, Tile) or isinstance(b, Tile):
        return NotImplemented
    if not all(isinstance(v, Scalar) or is_number(v) for v in (a, b)):
        return NotImplemented
    ea, eb = to_expr(a), to_expr(b)
    if op == "/" and ea.dtype.is_integer and eb.dtype.is_integer:
        raise VMError("'/' on integer runtime values is not defined; use // (floor division) "
                      "or convert to a float first (x.to(tv.f32))")
    if ea.dtype == BOOL and eb.dtype == BOOL and op in _BOOL_OPS:
        op = _BOOL_OPS[op]
    return Scalar(Binary(op, ea, eb))


def scalar_binary(op: str, a: Any, b: Any) -> Scalar:
    """`op` in ("cdiv", "min", "max") on scalars or numbers (at least one a Scalar)."""
    return Scalar(Binary(op, to_expr(a), to_expr(b)))


# ---- Tile -------------------------------------------------------------------------------------

_TILE_BINOPS = {
    "+": "add", "-": "sub", "*": "mul", "/": "div", "//": "div", "%": "mod",
    "&": "and", "|": "or", "^": "xor", "<<": "shl", ">>": "shr",
    "<": "lt", "<=": "le", "==": "eq", "!=": "ne", ">": "gt", ">=": "ge",
    "min": "min", "max": "max",
}


class Tile:
    """A tensor: a view of global memory, a shared-memory tile or a register tile."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: Tensor) -> None:
        self.tensor = tensor

    @property
    def name(self) -> str:
        return self.tensor.name

    @property
    def space(self) -> MemorySpace:
        return self.tensor.space

    @property
    def dtype(self) -> DataType:
        return self.tensor.dtype

    @property
    def layout(self) -> Any:
        return self.tensor.layout

    @property
    def shape(self) -> tuple[Any, ...]:
        """Ints for register and shared tiles; global views may have runtime sizes."""
        return tuple(s if isinstance(s, int) else Scalar(s) for s in self.tensor.shape)

    @property
    def ndim(self) -> int:
        return len(self.tensor.shape)

    def __repr__(self) -> str:
        return f"Tile(%{self.tensor.name}: {self.tensor.type})"

    def require_register(self, what: str) -> Tensor:
        if self.space is not MemorySpace.REGISTER:
            hint = {MemorySpace.GLOBAL: "tv.load_global", MemorySpace.SHARED: "tv.load_shared"}
            raise VMError(f"{what} needs a register tile, but {self} is in {self.space.value} "
                          f"memory; load it first with {hint[self.space]}")
        return self.tensor

    # ---- conversions --------------------------------------------------------------------
    def to(self, dtype: DataType | str, layout: Any = None, exponent: int = 0) -> Tile:
        """Convert every element to `dtype` (the `cast` instruction), times 2^exponent."""
        src = self.require_register("cast")
        target = as_dtype(dtype)
        if exponent and not (self.dtype.is_lowbit and target.is_float):
            raise VMError(f"a cast with an exponent takes 1..8-bit codes into a float type, "
                          f"got {self.dtype} -> {target}")
        ctx = current("Tile.to")
        return Tile(ctx.builder.cast(src, target, layout, exponent=exponent))

    def view(self, dtype: DataType | str, shape: Any, layout: Any) -> Tile:
        """Reinterpret the bits each thread holds as `dtype` elements under `layout` (the
        `view` instruction; legal iff the bits per thread are preserved)."""
        b = current("tv.view").builder
        self.require_register("tv.view")
        target = as_dtype(dtype, "tv.view dtype")
        tile_shape = static_shape(shape, "tv.view shape")
        if layout is None:
            raise VMError("tv.view needs the layout of the result (what a view means depends "
                          "on which thread holds which bits)")
        layout = layout_for(layout, tile_shape, MemorySpace.REGISTER, "tv.view")
        src = self.layout
        if isinstance(src, RegisterLayout):
            before, after = src.local_size * self.dtype.bits, layout.local_size * target.bits
            if before != after:
                raise VMError(f"tv.view changes the bits each thread holds ({before} -> "
                              f"{after}): {src.local_size} x {self.dtype} vs "
                              f"{layout.local_size} x {target}")
        return Tile(b.view(self.tensor, target, tile_shape, layout))

    def sum(self, dim: int, keepdim: bool = False) -> Tile:
        return reduce_tile("sum", self, dim, keepdim)

    def max(self, dim: int, keepdim: bool = False) -> Tile:
        return reduce_tile("max", self, dim, keepdim)

    def min(self, dim: int, keepdim: bool = False) -> Tile:
        return reduce_tile("min", self, dim, keepdim)

    # ---- Python protocol ----------------------------------------------------------------
    def __bool__(self) -> bool:
        raise VMError("a tile cannot be a Python bool; use tv.where for elementwise choices, "
                      "or reduce it to a scalar first")

    def __getitem__(self, key: Any) -> Any:
        raise VMError("tiles cannot be indexed; load the sub-tile you need "
                      "(tv.load_global / tv.load_shared with offsets and a shape)")

    def __iter__(self):
        raise VMError("a tile cannot be iterated over in Python")

    def __index__(self) -> int:
        raise VMError("a tile cannot be used as a Python int")

    __hash__ = None  # type: ignore[assignment]
    __array_ufunc__ = None

    def __add__(self, o): return tile_binary("+", self, o)
    def __radd__(self, o): return tile_binary("+", o, self)
    def __sub__(self, o): return tile_binary("-", self, o)
    def __rsub__(self, o): return tile_binary("-", o, self)
    def __mul__(self, o): return tile_binary("*", self, o)
    def __rmul__(self, o): return tile_binary("*", o, self)
    def __truediv__(self, o): return tile_binary("/", self, o)
    def __rtruediv__(self, o): return tile_binary("/", o, self)
    def __floordiv__(self, o): return tile_binary("//", self, o)
    def __rfloordiv__(self, o): return tile_binary("//", o, self)
    def __mod__(self, o): return tile_binary("%", self, o)
    def __rmod__(self, o): return tile_binary("%", o, self)
    def __and__(self, o): return tile_binary("&", self, o)
    def __rand__(self, o): return tile_binary("&", o, self)
    def __or__(self, o): return tile_binary("|", self, o)
    def __ror__(self, o): return tile_binary("|", o, self)
    def __xor__(self, o): return tile_binary("^", self, o)
    def __rxor__(self, o): return tile_binary("^", o, self)
    def __lshift__(self, o): return tile_binary("<<", self, o)
    def __rlshift__(self, o): return tile_binary("<<", o, self)
    def __rshift__(self, o): return tile_binary(">>", self, o)
    def __rrshift__(self, o): return tile_binary(">>", o, self)
    def __lt__(self, o): return tile_binary("<", self, o)
    def __le__(self, o): return tile_binary("<=", self, o)
    def __gt__(self, o): return tile_binary(">", self, o)
    def __ge__(self, o): return tile_binary(">=", self, o)
    def __eq__(self, o): return tile_binary("==", self, o)  # type: ignore[override]
    def __ne__(self, o): return tile_binary("!=", self, o)  # type: ignore[override]

    def __neg__(self) -> Tile:
        return tile_unary("neg", self)

    def __pos__(self) -> Tile:
        return self

    def __invert__(self) -> Tile:
        return tile_unary("not", self)

    def __abs__(self) -> Tile:
        return tile_unary("abs", self)


def broadcast_shapes(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The broadcast shape of tiles (ir.types.broadcast_shapes), or a VMError."""
    shape = ir_broadcast_shapes(shapes)
    if shape is None:
        text = " and ".join(str(list(s)) for s in shapes)
        raise VMError(f"tile shapes {text} do not broadcast")
    return shape


def _tile_operands(what: str, values: tuple[Any, ...]) -> tuple[list[Any], DataType] | None:
    """The `elementwise` operands of `values` (tiles, runtime scalars, numbers; at least
    one tile) and the tiles' dtype, or None if one is none of those. `what` names the
    operation in errors."""
    operands = []
    tiles: list[Tile] = []
    for v in values:
        if isinstance(v, Tile):
            v.require_register(what)
            tiles.append(v)
            operands.append(v.tensor)
        elif isinstance(v, Scalar) or is_number(v):
            operands.append(v)
        else:
            return None
    dtype = tiles[0].dtype
    for t in tiles[1:]:
        if t.dtype != dtype:
            raise VMError(f"{what} on tiles of different dtypes ({dtype} and {t.dtype}); "
                          "convert one first with .to(dtype)")
    for v in values:
        is_float = (v.dtype.is_float if isinstance(v, Scalar)
                    else is_number(v) and not isinstance(v, numbers.Integral))
        if is_float and dtype.is_integer:
            raise VMError(f"{what} mixes a {dtype} tile with a float scalar; "
                          "convert the tile first with .to(tv.f32)")
    broadcast_shapes([t.tensor.type.static_shape for t in tiles])
    return [v if isinstance(v, Tensor) else to_expr(v) for v in operands], dtype


def tile_binary(op: str, a: Any, b: Any) -> Any:
    """`a op b` where at least one side is a Tile: an `elementwise` instruction."""
    found = _tile_operands(f"operator {op}", (a, b))
    if found is None:
        return NotImplemented
    args, dtype = found
    if op == "/" and dtype.is_integer:
        raise VMError("'/' on integer tiles is not defined; use // (integer division) or "
                      "convert to a float first with .to(tv.f32)")
    if op == "//" and dtype.is_float:
        raise VMError("'//' on float tiles is not supported; use /")
    if op in ("&", "|", "^", "<<", ">>") and dtype.is_float:
        raise VMError(f"bitwise operator {op} needs integer tiles, got {dtype} "
                      "(reinterpret the bits with tv.view first)")
    ctx = current(f"the tile operator {op}")
    return Tile(ctx.builder.elementwise(_TILE_BINOPS[op], *args))


def tile_fma(a: Any, b: Any, c: Any) -> Tile:
    """`a * b + c` rounded once: an `elementwise` fma (at least one operand a Tile)."""
    found = _tile_operands("tv.fma", (a, b, c))
    if found is None:
        bad = next(v for v in (a, b, c) if not isinstance(v, (Tile, Scalar)) and not is_number(v))
        raise VMError(f"tv.fma operands must be tiles, runtime scalars or numbers, got "
                      f"{describe(bad)}")
    args, dtype = found
    if not dtype.is_float:
        raise VMError(f"tv.fma needs float tiles, got {dtype}; convert with .to(tv.f32)")
    return Tile(current("tv.fma").builder.elementwise("fma", *args))


def tile_unary(op: str, x: Tile) -> Tile:
    src = x.require_register(op)
    if op in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt") and not x.dtype.is_float:
        raise VMError(f"{op} needs a float tile, got {x.dtype}; convert with .to(tv.f32)")
    ctx = current(op)
    return Tile(ctx.builder.elementwise(op, src))


def reduce_tile(op: str, x: Tile, dim: Any, keepdim: bool = False, layout: Any = None
                ) -> Tile:
    src = x.require_register(f"{op} reduction")
    d = static_int(dim, f"the dimension of {op}")
    if not -x.ndim <= d < x.ndim:
        raise VMError(f"{op}: dimension {d} is out of range for a {x.ndim}-d tile")
    ctx = current(op)
    return Tile(ctx.builder.reduce(op, src, d % x.ndim, bool(keepdim), layout))
