"""The verifier's shared machinery (`ir.verifier` drives it): a broken rule (`Fail`,
`fail`), the quoting of program objects in messages, the scope `Context` that checks
read and update, and the checks of scalar expressions and tensors (definitions, uses,
layouts, tiles at offsets) that the instruction and statement rules build on.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, NoReturn

from tilevm.dtypes import DataType, DTypeError, parse
from tilevm.dtypes.constants import literal_value
from tilevm.ir import instructions as ins
from tilevm.ir.errors import SourceLoc
from tilevm.ir.expr import (
    ARITHMETIC_OPS,
    BINARY_OPS,
    BITWISE_OPS,
    BOOL,
    COMPARISON_OPS,
    LOGICAL_OPS,
    UNARY_OPS,
    Binary,
    BlockIndex,
    Const,
    Expr,
    ScalarCast,
    Select,
    Unary,
    Var,
    format_expr,
    promote,
)
from tilevm.ir.printer import format_instruction
from tilevm.ir.stmt import AssignVar, For, If, Let, Program
from tilevm.ir.types import MemorySpace, Pointer, Tensor, TensorType, broadcast_shapes, format_type
from tilevm.layouts.register_layout import RegisterLayout
from tilevm.layouts.shared_layout import SharedLayout

MAX_EXPR_SIZE = 100_000  # nodes of a scalar expression written out as a tree
# Limits every target shares (docs/ir.md, "Limits"): a register tile needs at most the
# 255 32-bit registers a thread has (in a layout's `local_size`, or at least its even
# share of the block's threads); one shared allocation fits the largest shared memory a
# block can have (227 KiB, sm_90; the backend checks the whole plan against its
# target's); a global view's elements and bit addresses fit int64 (the indexing's type).
MAX_REGISTERS_PER_THREAD = 255
MAX_SHARED_BYTES = 227 * 1024
MAX_GLOBAL_BITS = 2**63 - 1
MAX_TEXT_SIZE = 5_000  # larger statements are not quoted in messages

INT32 = parse("int32")

G, S, R = MemorySpace.GLOBAL, MemorySpace.SHARED, MemorySpace.REGISTER


# ---- errors -------------------------------------------------------------------------------

class Fail(Exception):
    """Internal: a broken rule, before the statement's text and location are attached."""

    def __init__(self, message: str, loc: SourceLoc | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.loc = loc  # set where the rule's subject has a line of its own (the grid)


def fail(message: str) -> NoReturn:
    raise Fail(message)


def short(value: Any, limit: int = 60) -> str:
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ only loses the quote
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _expanded_size(obj: Any, limit: int, memo: dict[int, int] | None = None) -> int:
    """Nodes of `obj` written out as a tree (a shared sub-object counts at each use), or
    `limit + 1` if more: linear in the object graph's size, however much it shares."""
    memo = {} if memo is None else memo
    key = id(obj)
    if key in memo:
        return memo[key]
    if isinstance(obj, tuple):
        items: Any = obj
    elif is_dataclass(obj) and not isinstance(obj, type) and not isinstance(obj, DataType):
        items = [getattr(obj, f.name, None) for f in fields(obj)]
    else:
        return 1
    memo[key] = limit + 1  # a cycle counts as too large
    total = 1
    for item in items:
        total += _expanded_size(item, limit, memo)
        if total > limit:
            total = limit + 1
            break
    memo[key] = total
    return total


def _small(obj: Any, limit: int = MAX_TEXT_SIZE) -> bool:
    return _expanded_size(obj, limit) <= limit


def shape_text(shape: Any) -> str:
    if not _small(shape, 1000):
        return "<a large shape>"
    try:
        return "[" + ", ".join(str(d) if isinstance(d, int) else format_expr(d)
                               for d in shape) + "]"
    except Exception:
        return short(shape)


def type_text(t: Any) -> str:
    try:
        return format_type(t)
    except Exception:
        return short(t)


def expr_text(e: Any) -> str:
    if not _small(e, 200):
        return "<a large expression>"
    try:
        return format_expr(e)
    except Exception:
        return short(e)


def statement_text(stmt: Any) -> str | None:
    """The statement as the printer writes it (its header for `for`/`if`); None if it
    cannot be printed (the message then stands alone)."""
    try:
        if isinstance(stmt, ins.Instruction):
            return format_instruction(stmt) if _small(stmt) else f"{stmt.opname} ..."
        if not _small(tuple(getattr(stmt, f.name, None) for f in fields(stmt)
                            if f.name not in ("body", "then_body", "else_body"))):
            return None
        if isinstance(stmt, For):
            return (f"for {stmt.var.name} in range({format_expr(stmt.start)}, "
                    f"{format_expr(stmt.stop)}, {format_expr(stmt.step)})")
        if isinstance(stmt, If):
            return f"if {format_expr(stmt.cond)}"
        if isinstance(stmt, Let):
            return f"let {stmt.var.name}: {stmt.var.dtype} = {format_expr(stmt.value)}"
        if isinstance(stmt, AssignVar):
            return f"{stmt.var.name} = {format_expr(stmt.value)}"
    except Exception:
        return None
    return None


def loc_of(stmt: Any) -> SourceLoc | None:
    try:
        loc = getattr(stmt, "loc", None)
    except Exception:
        return None
    return loc if isinstance(loc, SourceLoc) else None


# ---- scopes -------------------------------------------------------------------------------

@dataclass
class Scope:
    kind: str  # "program", "for body", "if body", "else body"
    loc: SourceLoc | None
    vars: dict[str, tuple[Var, str]] = field(default_factory=dict)  # name -> (var, origin)
    tensors: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class Context:
    """What the verifier knows at a point of the program (checkers read and update it)."""

    program: Program
    num_threads: int
    grid_rank: int
    pointers: dict[str, Pointer]
    scopes: list[Scope] = field(default_factory=list)
    tensor_names: set[str] = field(default_factory=set)  # every name ever defined
    gone: dict[str, str] = field(default_factory=dict)  # name -> where it was visible
    freed: dict[str, str] = field(default_factory=dict)  # shared tensor -> how it was freed
    loop_depth: dict[str, int] = field(default_factory=dict)  # tensor -> loops around its def
    view_ptr: dict[str, Pointer] = field(default_factory=dict)  # global tensor -> pointer
    annotations: dict[str, Any] = field(default_factory=dict)
    depth: int = 0  # enclosing loops
    first_global_write: str = ""  # "store_global at file:line": the first one, if any
    op: str = ""  # the statement being checked, for messages

    # ---- scalars ----
    def lookup_var(self, name: str) -> tuple[Var, str] | None:
        for scope in reversed(self.scopes):
            if name in scope.vars:
                return scope.vars[name]
        return None

    def declare_var(self, var: Any, origin: str) -> None:
        if not isinstance(var, Var) or type(var.name) is not str or not var.name:
            fail(f"{self.op}: the variable must be a Var with a name, got {short(var)}")
        if not isinstance(var.dtype, DataType):
            fail(f"{self.op}: variable {var.name} has no dtype (got {short(var.dtype)})")
        if self.lookup_var(var.name) is not None or var.name in self.pointers:
            fail(f"{self.op}: {var.name} is already defined; a variable name may not be "
                  "redeclared while it is visible")
        self.scopes[-1].vars[var.name] = (var, origin)

    # ---- tensors ----
    def lookup_tensor(self, name: str) -> Tensor | None:
        for scope in reversed(self.scopes):
            if name in scope.tensors:
                return scope.tensors[name]
        return None

    def define_tensor(self, tensor: Tensor) -> None:
        if tensor.name in self.tensor_names:
            fail(f"{self.op}: tensor %{tensor.name} is defined twice; tensor names must be "
                  "unique in a program")
        self.tensor_names.add(tensor.name)
        self.scopes[-1].tensors[tensor.name] = tensor
        self.loop_depth[tensor.name] = self.depth


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ---- scalar expressions -------------------------------------------------------------------

def check_expr(ctx: Context, expr: Any, what: str) -> DataType:
    """Check a scalar expression; return its dtype."""
    _require_expr(ctx, expr, what)
    if _expanded_size(expr, MAX_EXPR_SIZE) > MAX_EXPR_SIZE:
        fail(f"{ctx.op}: {what} is too large (more than {MAX_EXPR_SIZE} nodes written out)")
    return _sub_expr(ctx, expr, what)


def _sub_expr(ctx: Context, expr: Any, what: str) -> DataType:
    _require_expr(ctx, expr, what)
    return _expr_dtype(ctx, expr, what)


def _require_expr(ctx: Context, expr: Any, what: str) -> None:
    if isinstance(expr, Tensor):
        fail(f"{ctx.op}: {what} must be a scalar expression, got tensor %{expr.name}")
    if isinstance(expr, Pointer):
        fail(f"{ctx.op}: {what} must be a scalar expression, got pointer {expr.name}")
    if not isinstance(expr, Expr):
        fail(f"{ctx.op}: {what} must be a scalar expression, got {short(expr)}")


def dtype_field(ctx: Context, value: Any, what: str) -> DataType:
    if not isinstance(value, DataType):
        fail(f"{ctx.op}: {what} has no valid dtype (got {short(value)})")
    return value


def _expr_dtype(ctx: Context, e: Expr, what: str) -> DataType:
    if isinstance(e, Const):
        dtype = dtype_field(ctx, e.dtype, f"constant in {what}")
        if not isinstance(e.value, (bool, int, float)):
            fail(f"{ctx.op}: constant {short(e.value)} in {what} is not a number")
        try:
            literal_value(e.value, dtype)  # the one rule for constants (dtypes/constants.py)
        except DTypeError as err:
            fail(f"{ctx.op}: constant {e.value!r} in {what} {err}")
        return dtype
    if isinstance(e, Var):
        if type(e.name) is not str:
            fail(f"{ctx.op}: a variable in {what} has no name (got {short(e.name)})")
        dtype = dtype_field(ctx, e.dtype, f"variable {e.name} in {what}")
        found = ctx.lookup_var(e.name)
        if found is None:
            if e.name in ctx.pointers:
                fail(f"{ctx.op}: {what} uses pointer {e.name} as a scalar")
            where = ctx.gone.get("$" + e.name)
            if where:
                fail(f"{ctx.op}: {what} uses variable {e.name}, which is defined in {where} "
                      "and not visible here")
            fail(f"{ctx.op}: {what} uses variable {e.name}, which is not defined before it")
        if found[0].dtype != dtype:
            fail(f"{ctx.op}: {what} uses {e.name} as {dtype} but it is declared as "
                  f"{found[0].dtype}")
        return dtype
    if isinstance(e, BlockIndex):
        if not is_int(e.axis) or not 0 <= e.axis < 3:
            fail(f"{ctx.op}: block index axis must be 0, 1 or 2, got {short(e.axis)}")
        dtype = dtype_field(ctx, e.dtype, what)
        if dtype.is_float:
            fail(f"{ctx.op}: block index must have an integer dtype, got {dtype}")
        if ctx.grid_rank == 0:
            fail(f"{ctx.op}: {what} uses block_idx; the grid may depend on scalar "
                  "parameters only")
        if e.axis >= ctx.grid_rank:
            fail(f"{ctx.op}: {what} uses block_idx.{'xyz'[e.axis]} but the grid has "
                  f"{ctx.grid_rank} dimension(s)")
        return dtype
    if isinstance(e, Binary):
        if e.op not in BINARY_OPS:
            fail(f"{ctx.op}: unknown scalar operator {short(e.op)} in {what}")
        lhs = _sub_expr(ctx, e.lhs, what)
        rhs = _sub_expr(ctx, e.rhs, what)
        if e.op == "/" and not (lhs.is_float or rhs.is_float):
            fail(f"{ctx.op}: `/` on integers in {what}; write `//` for integer division")
        if e.op in BITWISE_OPS and (lhs.is_float or rhs.is_float):
            fail(f"{ctx.op}: bitwise `{e.op}` in {what} needs integer operands, got "
                  f"{lhs} and {rhs}")
        if e.op in LOGICAL_OPS and (lhs != BOOL or rhs != BOOL):
            fail(f"{ctx.op}: `{e.op}` in {what} needs bool operands, got {lhs} and {rhs}")
        if e.op in COMPARISON_OPS or e.op in LOGICAL_OPS:
            return BOOL
        if e.op in ("<<", ">>"):
            return lhs
        assert e.op in ARITHMETIC_OPS or e.op in BITWISE_OPS
        return promote(lhs, rhs)
    if isinstance(e, Unary):
        if e.op not in UNARY_OPS:
            fail(f"{ctx.op}: unknown scalar operator {short(e.op)} in {what}")
        dtype = _sub_expr(ctx, e.operand, what)
        if e.op == "not" and dtype != BOOL:
            fail(f"{ctx.op}: `not` in {what} needs a bool operand, got {dtype}")
        if e.op == "~" and dtype.is_float:
            fail(f"{ctx.op}: `~` in {what} needs an integer operand, got {dtype}")
        return BOOL if e.op == "not" else dtype
    if isinstance(e, Select):
        cond = _sub_expr(ctx, e.cond, what)
        if cond != BOOL:
            fail(f"{ctx.op}: select condition in {what} must be bool, got {cond}")
        return promote(_sub_expr(ctx, e.if_true, what), _sub_expr(ctx, e.if_false, what))
    if isinstance(e, ScalarCast):
        _sub_expr(ctx, e.operand, what)
        return dtype_field(ctx, e.dtype, f"conversion in {what}")
    fail(f"{ctx.op}: {what}: unknown expression node {type(e).__name__}")


def check_int_expr(ctx: Context, expr: Any, what: str) -> DataType:
    dtype = check_expr(ctx, expr, what)
    if dtype.is_float or dtype == BOOL:
        fail(f"{ctx.op}: {what} must be an integer, got {expr_text(expr)} of type {dtype}")
    return dtype


_FOLD: dict[str, Callable[[int, int], int]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "min": min, "max": max,
}


def const_int(expr: Expr) -> int | None:
    """The value of an integer expression built from constants only (else None).
    Only cheap, total operations are folded (no shifts, no division by zero)."""
    if isinstance(expr, Const):
        v = expr.value
        return v if is_int(v) else None
    if isinstance(expr, Unary) and expr.op == "-":
        v = const_int(expr.operand)
        return None if v is None else -v
    if isinstance(expr, Binary):
        a, b = const_int(expr.lhs), const_int(expr.rhs)
        if a is None or b is None:
            return None
        value = None
        if expr.op in _FOLD:
            value = _FOLD[expr.op](a, b)
        elif expr.op in ("//", "%", "cdiv") and b != 0:
            value = a // b if expr.op == "//" else a % b if expr.op == "%" else -(-a // b)
        return value if value is not None and abs(value) < 2**64 else None
    return None


def check_offsets(ctx: Context, offsets: Any, target: Tensor, name: str = "offsets"
                   ) -> tuple[Expr, ...]:
    if not isinstance(offsets, tuple):
        fail(f"{ctx.op}: {name} must be a tuple of integer expressions, got "
              f"{short(offsets)}")
    if len(offsets) != target.type.ndim:
        fail(f"{ctx.op}: {len(offsets)} offsets for %{target.name}, which has "
              f"{target.type.ndim} dimensions; give one offset per dimension")
    for i, off in enumerate(offsets):
        check_int_expr(ctx, off, f"offset {i}")
    return offsets


# ---- tensors ------------------------------------------------------------------------------

def _check_tensor_type(ctx: Context, tensor: Tensor) -> None:
    """The rules every tensor's type follows (checked where it is defined)."""
    t = tensor.type
    if not isinstance(t, TensorType):
        fail(f"{ctx.op}: %{tensor.name} has no tensor type (got {short(t)})")
    if not isinstance(t.space, MemorySpace):
        fail(f"{ctx.op}: %{tensor.name} has no memory space (got {short(t.space)})")
    dtype_field(ctx, t.dtype, f"%{tensor.name}")
    if not isinstance(t.shape, tuple):
        fail(f"{ctx.op}: %{tensor.name}'s shape must be a tuple, got {short(t.shape)}")
    if t.space is G:
        for d, n in enumerate(t.shape):
            if is_int(n):
                if n < 1:
                    fail(f"{ctx.op}: %{tensor.name}'s extent {n} (dim {d}) must be >= 1")
            else:
                check_int_expr(ctx, n, f"extent {d} of %{tensor.name}")
        if t.layout is not None:
            fail(f"{ctx.op}: global tensor %{tensor.name} has a layout; a global view's "
                  "strides are given by global_view")
        static = [n if is_int(n) else const_int(n) for n in t.shape]
        if math.prod(n for n in static if n is not None) * t.dtype.bits > MAX_GLOBAL_BITS:
            fail(f"{ctx.op}: global view %{tensor.name} of shape {shape_text(t.shape)} "
                  f"holds more than 2^63 bits of {t.dtype}; its bit addresses overflow int64")
        return
    for n in t.shape:
        if not is_int(n) or n < 1:
            fail(f"{ctx.op}: {t.space.value} tensor %{tensor.name} needs a static shape of "
                  f"positive ints, got {shape_text(t.shape)}")
    if t.space is R:
        check_register_layout(ctx, t.layout, tensor)
        _check_register_budget(ctx, tensor)
    else:
        check_shared_layout(ctx, t.layout, tensor)
        _check_shared_budget(ctx, tensor)


def _check_register_budget(ctx: Context, tensor: Tensor) -> None:
    """A tile lives in its threads' registers: it may need at most the 255 a thread has
    (an estimate from below: the layout's elements per thread, or without a layout the
    tile spread evenly over the block, whatever else is live beside it)."""
    t = tensor.type
    elements = math.prod(t.shape)
    per_thread = (t.layout.local_size if t.layout is not None
                  else -(-elements // ctx.num_threads))
    registers = -(-per_thread * t.dtype.bits // 32)
    if registers > MAX_REGISTERS_PER_THREAD:
        fail(f"{ctx.op}: register tile %{tensor.name} ({type_text(t)}, {elements} elements "
              f"over {ctx.num_threads} threads) needs {registers} 32-bit registers per "
              f"thread; a thread has {MAX_REGISTERS_PER_THREAD}. Split the tile, or use "
              "more warps or shared memory")


def _check_shared_budget(ctx: Context, tensor: Tensor) -> None:
    t = tensor.type
    size = (t.layout.size_bytes if t.layout is not None
            else -(-math.prod(t.shape) * t.dtype.bits // 8))
    if size > MAX_SHARED_BYTES:
        fail(f"{ctx.op}: shared tensor %{tensor.name} ({type_text(t)}) takes {size} bytes; "
              f"a block has at most {MAX_SHARED_BYTES} bytes ({MAX_SHARED_BYTES // 1024} "
              "KiB, sm_90) of shared memory")


def check_register_layout(ctx: Context, layout: Any, tensor: Tensor) -> None:
    if layout is None:
        return
    if not isinstance(layout, RegisterLayout):
        fail(f"{ctx.op}: register tensor %{tensor.name}'s layout must be a RegisterLayout, "
              f"got {short(layout)}")
    if tuple(layout.shape) != tuple(tensor.type.shape):
        fail(f"{ctx.op}: layout {layout} has shape {shape_text(layout.shape)} but "
              f"%{tensor.name} is {shape_text(tensor.type.shape)}; a register layout must "
              "have its tensor's shape")
    if layout.num_threads != ctx.num_threads:
        fail(f"{ctx.op}: layout {layout} of %{tensor.name} spreads over {layout.num_threads} "
              f"threads but the block has {ctx.num_threads} ({ctx.program.num_warps} warps); "
              "a register layout covers all threads of the block (replicate a small tile)")


def check_shared_layout(ctx: Context, layout: Any, tensor: Tensor) -> None:
    if layout is None:
        return
    if not isinstance(layout, SharedLayout):
        fail(f"{ctx.op}: shared tensor %{tensor.name}'s layout must be a SharedLayout, "
              f"got {short(layout)}")
    if tuple(layout.shape) != tuple(tensor.type.shape):
        fail(f"{ctx.op}: shared layout {layout} has shape {shape_text(layout.shape)} but "
              f"%{tensor.name} is {shape_text(tensor.type.shape)}; a shared layout must "
              "have its tensor's shape")
    if layout.element_bits != tensor.type.dtype.bits:
        fail(f"{ctx.op}: shared layout {layout} holds {layout.element_bits}-bit elements "
              f"but %{tensor.name} is {tensor.type.dtype} ({tensor.type.dtype.bits} bits)")


def check_tensor_object(ctx: Context, tensor: Any, what: str) -> Tensor:
    if not isinstance(tensor, Tensor):
        fail(f"{ctx.op}: {what} must be a tensor, got {short(tensor)}")
    if type(tensor.name) is not str or not tensor.name:
        fail(f"{ctx.op}: {what} has no name (got {short(tensor.name)})")
    return tensor


def define(ctx: Context, inst: Any, space: MemorySpace, what: str = "out") -> Tensor:
    """Check an instruction's result (in `space`) and define it."""
    tensor = check_tensor_object(ctx, getattr(inst, what), what)
    _check_tensor_type(ctx, tensor)
    if tensor.type.space is not space:
        fail(f"{ctx.op}: {what} must be a {space.value} tensor, got {tensor.type.space.value} "
              f"tensor %{tensor.name}")
    return tensor


def use(ctx: Context, value: Any, what: str, spaces: tuple[MemorySpace, ...]) -> Tensor:
    """Check a tensor operand: defined, visible, alive, with its defined type, in `spaces`."""
    tensor = check_tensor_object(ctx, value, what)
    found = ctx.lookup_tensor(tensor.name)
    if found is None:
        where = ctx.gone.get(tensor.name)
        if where:
            fail(f"{ctx.op}: {what} %{tensor.name} is defined in {where} and not visible "
                  "here; a tensor defined in a loop or branch body lives in that body only")
        fail(f"{ctx.op}: {what} %{tensor.name} is not defined before it is used")
    if tensor.name in ctx.freed:
        fail(f"{ctx.op}: {what} %{tensor.name} is used after free_shared "
              f"({ctx.freed[tensor.name]})")
    if tensor.type != found.type:
        fail(f"{ctx.op}: {what} %{tensor.name} is used as {type_text(tensor.type)} but was "
              f"defined as {type_text(found.type)}")
    if found.type.space not in spaces:
        allowed = " or ".join(s.value for s in spaces)
        fail(f"{ctx.op}: {what} must be a {allowed} tensor, got {found.type.space.value} "
              f"tensor %{tensor.name}")
    return found


def check_operand(ctx: Context, value: Any, what: str) -> Tensor | DataType:
    """A register tensor or a scalar expression operand: the tensor, or the scalar's dtype."""
    if isinstance(value, Tensor):
        return use(ctx, value, what, (R,))
    return check_expr(ctx, value, what)


broadcast = broadcast_shapes  # the shared rule (ir/types.py)


def same_layout(a: Tensor, b: Tensor) -> bool:
    return a.type.layout is None or b.type.layout is None or a.type.layout == b.type.layout


def check_tile(ctx: Context, tile: Tensor, target: Tensor, offsets: tuple[Expr, ...],
                must_fit: bool, noun: str) -> None:
    """`tile` is read from / written to `target[offsets + i]`: same rank and dtype; for a
    shared target the tile lies inside it."""
    if tile.type.ndim != target.type.ndim:
        fail(f"{ctx.op}: %{tile.name} is {shape_text(tile.type.shape)} but %{target.name} "
              f"is {shape_text(target.type.shape)}; a {noun} needs a tile with the same "
              "number of dimensions")
    if tile.type.dtype != target.type.dtype:
        fail(f"{ctx.op}: %{tile.name} is {tile.type.dtype} but %{target.name} is "
              f"{target.type.dtype}; a {noun} keeps the dtype (use cast to convert)")
    if not must_fit:
        return
    for d, (n, size) in enumerate(zip(tile.type.shape, target.type.shape)):
        start = const_int(offsets[d])
        if n > size or (start is not None and not 0 <= start <= size - n):
            span = f"[{start}, {start + n})" if start is not None else f"{n} elements"
            fail(f"{ctx.op}: the tile {span} in dim {d} does not fit in shared tensor "
                  f"%{target.name} of shape {shape_text(target.type.shape)}")


