"""The verifier: `verify(program)` checks every rule of the VM and raises a `VMError` for
the first one a program breaks (in program order), naming the rule, the instruction (as
the printer writes it) and the user's source line (`VMError.loc`).

It raises nothing but `VMError`, whatever the program object holds (wrong Python types
in any field included), and runs in time linear in the program's size.

Each instruction is checked by the module-level function `check_<opname>(ctx, inst)`
(`CHECKERS` maps opnames to them); statements are checked by `_check_for`, `_check_if`,
`_check_let`, `_check_assign_var`. The rules (docs list the same):

Program
  - `name` is a string; `params` are `Pointer`s and scalar `Var`s with distinct names;
  - `num_warps` is an int in 1..32 (so a block has 32..1024 threads); `producer_warps`
    is 0, 1 or 4 (the block's warps together at most 32), and `producer` is None (the
    compiler derives it); `producer_registers` is nonzero exactly with 4 producer warps,
    and then passes `ir.stmt.producer_registers_problem` (a multiple of 8 in 24..256,
    `num_warps` a multiple of 4, the other warps left with more than they start with);
    `producer_converts` is a bool, true only with the producer warpgroup and cluster 1;
  - `cluster` is 1, 2, 4 or 8 (`CLUSTER_SIZES`); a `copy_async` with `multicast` needs a
    cluster of more than one block and a producer warp;
  - `grid` has 1 to 3 integer expressions over the scalar parameters and constants only
    (no `block_idx`, no loop or `let` variables); a constant extent is >= 1.

Scoping
  - a scalar variable is visible after its definition: parameters everywhere, a `let`
    from its statement to the end of the enclosing block, a loop variable in its loop's
    body only; a name is not redeclared while visible, and every use has the declared
    dtype;
  - a tensor is visible from the instruction that defines it (its `out`) to the end of
    the enclosing block; a tensor defined in a `for`/`if` body is not visible after it;
    tensor names are unique in the program; a use must carry the type the tensor was
    defined with;
  - a shared tensor is not used after `free_shared` (nor freed twice); after an `if`, a
    tensor freed in either branch counts as freed; a shared tensor may not be freed
    inside a loop it was not allocated in (the next iteration would use freed memory).

Scalar expressions
  - well formed (known node, known op, `Const` value of its dtype's kind);
  - `/` needs a float operand (write `//` on integers); bitwise ops (`& | ^ << >> ~`)
    take integers; `and`/`or`/`not` and a `select` condition take bool (uint1);
  - `block_idx.<axis>` exists in the grid (axis < number of grid dimensions).
  - Offsets, strides, shapes of global views, loop bounds are integer expressions.

Tensors (every `out`, and every use)
  - register and shared tensors have static shapes of positive ints; global views have
    int (>= 1) or integer-expression extents;
  - a register tensor's layout is `None` (layout inference chooses) or a `RegisterLayout`
    of the tensor's shape with exactly `program.num_threads` threads (replicas included:
    a tile smaller than the block is spread with `replicated(...)`);
  - a shared tensor's layout is `None` (the planner chooses) or a `SharedLayout` of the
    tensor's shape whose element width is the dtype's width;
  - a global tensor has no layout (its strides live in `global_view`).

Instructions (memory spaces: G global, S shared, R register)
  - global_view: `ptr` is a pointer parameter; out is G with the pointer's dtype or one of
    the same bit width; one stride per dimension; offset and strides are integers;
  - load_global R <- G; store_global G <- R, and never through a `const` (readonly)
    pointer ("store to read-only parameter x"); load_shared R <- S; store_shared S <- R;
    copy_async S <- G. For all five: one offset per dimension of the indexed (G or S)
    tensor, integer offsets, the tile has that tensor's rank and dtype, `other` is a
    number (an integer for integer dtypes); a shared tile fits in the shared tensor
    (each tile extent <= the tensor's, and with constant offsets, offset >= 0 and
    offset + extent <= extent of the shared tensor);
  - alloc_shared out S; free_shared S; copy_async_wait n is an int >= 0;
  - full: out R, value a scalar expression (converted to out's dtype);
  - assign: dst and src R with equal dtype and shape (and layout, when both have one);
  - view: out, src R, both with layouts, equal thread counts and equal bits per thread
    (`layout.local_size * dtype.bits`);
  - cast: out, src R of equal shape; any dtype to any dtype; a nonzero `exponent` (an
    int) needs a 1..8-bit src and a float out;
  - elementwise: `op` in UNARY_TENSOR_OPS (1 operand), BINARY_TENSOR_OPS (2) or
    TERNARY_TENSOR_OPS (3: fma, floats only); at least
    one R tensor operand, all of one dtype; scalar operands are any expression except a
    float scalar with integer tensors; shapes broadcast (numpy rules) and out's shape is
    the broadcast shape; comparisons give bool (uint1), every other op gives the operand
    dtype; bitwise ops (and, or, xor, shl, shr, not) take integers only; exp, exp2, log,
    log2, sqrt, rsqrt take floats only;
  - where: cond an R tensor of bool; x, y R tensors or scalars; tensor x, y share out's
    dtype; shapes broadcast to out's shape;
  - reduce: op in REDUCE_OPS; `dim` an int in 0..ndim-1; `keepdim` a bool; out is src's
    shape without dim `dim` (size 1 with keepdim), with src's dtype;
  - dot: a[m, k], b[k, n], c[m, n], all R; a and b of one dtype from `DOT_ACCUMULATORS`,
    c of a dtype that table allows for it; out has c's dtype and shape (and layout,
    when both have one);
  - annotate_layout: an R tensor with a `RegisterLayout` (or an S tensor with a
    `SharedLayout`) valid for it, equal to the tensor's own layout if it has one and to
    any earlier annotation of it;
  - print: a R or S tensor, or a scalar expression; `message` a string.

Statements
  - for: the loop variable is an integer `Var`; start, stop, step are integer
    expressions; a constant step is not 0; `unroll` is None or an int >= 1;
  - if: the condition is a bool (uint1) expression (compare integers with `!= 0`);
  - let / assign_var: the value converts implicitly to the variable's dtype: same dtype,
    integer -> integer (wraps), integer -> float, float -> float (rounds); float ->
    integer and anything but bool -> bool need an explicit conversion; assign_var only
    updates a variable declared by `let` (not a parameter, not a loop variable).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, NoReturn

from tilevm.dtypes import DataType, parse
from tilevm.ir import instructions as ins
from tilevm.ir.errors import SourceLoc, VMError
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
    promote,
)
from tilevm.ir.stmt import (
    CLUSTER_SIZES,
    WARPGROUP_WARPS,
    AssignVar,
    For,
    If,
    Let,
    Program,
    Seq,
    producer_registers_problem,
)
from tilevm.ir.types import (
    MemorySpace,
    Pointer,
    PointerType,
    Tensor,
    TensorType,
    broadcast_shapes,
)
from tilevm.layouts.register_layout import RegisterLayout
from tilevm.layouts.shared_layout import SharedLayout

__all__ = ["verify", "CHECKERS", "DOT_ACCUMULATORS", "MAX_WARPS"]

MAX_WARPS = 32  # 1024 threads, the CUDA limit per block
MAX_EXPR_SIZE = 100_000  # nodes of a scalar expression written out as a tree
_MAX_TEXT_SIZE = 5_000  # larger statements are not quoted in messages

INT32 = parse("int32")
_F32, _F16 = parse("f32"), parse("f16")

#: dot: the input dtypes (a and b alike) and the accumulator dtypes (c, out) each allows.
DOT_ACCUMULATORS: dict[DataType, tuple[DataType, ...]] = {
    **{parse(t): (_F32, _F16) for t in ("f16", "bf16", "f32", "f8e4m3", "f8e5m2")},
    **{parse(t): (INT32,) for t in ("int8", "uint8", "int4", "uint4")},
}

BITWISE_TENSOR_OPS = ("and", "or", "xor", "shl", "shr", "not")
FLOAT_ONLY_TENSOR_OPS = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "fma")

G, S, R = MemorySpace.GLOBAL, MemorySpace.SHARED, MemorySpace.REGISTER


# ---- errors -------------------------------------------------------------------------------

class _Fail(Exception):
    """Internal: a broken rule, before the statement's text and location are attached."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _fail(message: str) -> NoReturn:
    raise _Fail(message)


def _short(value: Any, limit: int = 60) -> str:
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


def _small(obj: Any, limit: int = _MAX_TEXT_SIZE) -> bool:
    return _expanded_size(obj, limit) <= limit


def _shape_text(shape: Any) -> str:
    if not _small(shape, 1000):
        return "<a large shape>"
    try:
        from tilevm.ir.printer import format_expr

        return "[" + ", ".join(str(d) if isinstance(d, int) else format_expr(d)
                               for d in shape) + "]"
    except Exception:
        return _short(shape)


def _type_text(t: Any) -> str:
    try:
        from tilevm.ir.printer import format_type

        return format_type(t)
    except Exception:
        return _short(t)


def _expr_text(e: Any) -> str:
    if not _small(e, 200):
        return "<a large expression>"
    try:
        from tilevm.ir.printer import format_expr

        return format_expr(e)
    except Exception:
        return _short(e)


def _statement_text(stmt: Any) -> str | None:
    """The statement as the printer writes it (its header for `for`/`if`); None if it
    cannot be printed (the message then stands alone)."""
    try:
        from tilevm.ir.printer import format_expr, format_instruction

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


def _loc_of(stmt: Any) -> SourceLoc | None:
    try:
        loc = getattr(stmt, "loc", None)
    except Exception:
        return None
    return loc if isinstance(loc, SourceLoc) else None


# ---- scopes -------------------------------------------------------------------------------

@dataclass
class _Scope:
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
    scopes: list[_Scope] = field(default_factory=list)
    tensor_names: set[str] = field(default_factory=set)  # every name ever defined
    gone: dict[str, str] = field(default_factory=dict)  # name -> where it was visible
    freed: dict[str, str] = field(default_factory=dict)  # shared tensor -> how it was freed
    loop_depth: dict[str, int] = field(default_factory=dict)  # tensor -> loops around its def
    view_ptr: dict[str, Pointer] = field(default_factory=dict)  # global tensor -> pointer
    annotations: dict[str, Any] = field(default_factory=dict)
    depth: int = 0  # enclosing loops
    op: str = ""  # the statement being checked, for messages

    # ---- scalars ----
    def lookup_var(self, name: str) -> tuple[Var, str] | None:
        for scope in reversed(self.scopes):
            if name in scope.vars:
                return scope.vars[name]
        return None

    def declare_var(self, var: Any, origin: str) -> None:
        if not isinstance(var, Var) or type(var.name) is not str or not var.name:
            _fail(f"{self.op}: the variable must be a Var with a name, got {_short(var)}")
        if not isinstance(var.dtype, DataType):
            _fail(f"{self.op}: variable {var.name} has no dtype (got {_short(var.dtype)})")
        if self.lookup_var(var.name) is not None or var.name in self.pointers:
            _fail(f"{self.op}: {var.name} is already defined; a variable name may not be "
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
            _fail(f"{self.op}: tensor %{tensor.name} is defined twice; tensor names must be "
                  "unique in a program")
        self.tensor_names.add(tensor.name)
        self.scopes[-1].tensors[tensor.name] = tensor
        self.loop_depth[tensor.name] = self.depth


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ---- scalar expressions -------------------------------------------------------------------

def check_expr(ctx: Context, expr: Any, what: str) -> DataType:
    """Check a scalar expression; return its dtype."""
    _require_expr(ctx, expr, what)
    if _expanded_size(expr, MAX_EXPR_SIZE) > MAX_EXPR_SIZE:
        _fail(f"{ctx.op}: {what} is too large (more than {MAX_EXPR_SIZE} nodes written out)")
    return _sub_expr(ctx, expr, what)


def _sub_expr(ctx: Context, expr: Any, what: str) -> DataType:
    _require_expr(ctx, expr, what)
    return _expr_dtype(ctx, expr, what)


def _require_expr(ctx: Context, expr: Any, what: str) -> None:
    if isinstance(expr, Tensor):
        _fail(f"{ctx.op}: {what} must be a scalar expression, got tensor %{expr.name}")
    if isinstance(expr, Pointer):
        _fail(f"{ctx.op}: {what} must be a scalar expression, got pointer {expr.name}")
    if not isinstance(expr, Expr):
        _fail(f"{ctx.op}: {what} must be a scalar expression, got {_short(expr)}")


def _dtype_field(ctx: Context, value: Any, what: str) -> DataType:
    if not isinstance(value, DataType):
        _fail(f"{ctx.op}: {what} has no valid dtype (got {_short(value)})")
    return value


def _expr_dtype(ctx: Context, e: Expr, what: str) -> DataType:
    if isinstance(e, Const):
        dtype = _dtype_field(ctx, e.dtype, f"constant in {what}")
        if not isinstance(e.value, (bool, int, float)):
            _fail(f"{ctx.op}: constant {_short(e.value)} in {what} is not a number")
        if not dtype.is_float and isinstance(e.value, float):
            _fail(f"{ctx.op}: constant {e.value!r} in {what} is not an integer but has "
                  f"type {dtype}")
        if dtype.is_integer and not dtype.min_exact <= e.value <= dtype.max_exact:
            _fail(f"{ctx.op}: constant {e.value!r} in {what} does not fit {dtype} "
                  f"([{dtype.min_exact}, {dtype.max_exact}])")
        return dtype
    if isinstance(e, Var):
        if type(e.name) is not str:
            _fail(f"{ctx.op}: a variable in {what} has no name (got {_short(e.name)})")
        dtype = _dtype_field(ctx, e.dtype, f"variable {e.name} in {what}")
        found = ctx.lookup_var(e.name)
        if found is None:
            if e.name in ctx.pointers:
                _fail(f"{ctx.op}: {what} uses pointer {e.name} as a scalar")
            where = ctx.gone.get("$" + e.name)
            if where:
                _fail(f"{ctx.op}: {what} uses variable {e.name}, which is defined in {where} "
                      "and not visible here")
            _fail(f"{ctx.op}: {what} uses variable {e.name}, which is not defined before it")
        if found[0].dtype != dtype:
            _fail(f"{ctx.op}: {what} uses {e.name} as {dtype} but it is declared as "
                  f"{found[0].dtype}")
        return dtype
    if isinstance(e, BlockIndex):
        if not _is_int(e.axis) or not 0 <= e.axis < 3:
            _fail(f"{ctx.op}: block index axis must be 0, 1 or 2, got {_short(e.axis)}")
        dtype = _dtype_field(ctx, e.dtype, what)
        if dtype.is_float:
            _fail(f"{ctx.op}: block index must have an integer dtype, got {dtype}")
        if ctx.grid_rank == 0:
            _fail(f"{ctx.op}: {what} uses block_idx; the grid may depend on scalar "
                  "parameters only")
        if e.axis >= ctx.grid_rank:
            _fail(f"{ctx.op}: {what} uses block_idx.{'xyz'[e.axis]} but the grid has "
                  f"{ctx.grid_rank} dimension(s)")
        return dtype
    if isinstance(e, Binary):
        if e.op not in BINARY_OPS:
            _fail(f"{ctx.op}: unknown scalar operator {_short(e.op)} in {what}")
        lhs = _sub_expr(ctx, e.lhs, what)
        rhs = _sub_expr(ctx, e.rhs, what)
        if e.op == "/" and not (lhs.is_float or rhs.is_float):
            _fail(f"{ctx.op}: `/` on integers in {what}; write `//` for integer division")
        if e.op in BITWISE_OPS and (lhs.is_float or rhs.is_float):
            _fail(f"{ctx.op}: bitwise `{e.op}` in {what} needs integer operands, got "
                  f"{lhs} and {rhs}")
        if e.op in LOGICAL_OPS and (lhs != BOOL or rhs != BOOL):
            _fail(f"{ctx.op}: `{e.op}` in {what} needs bool operands, got {lhs} and {rhs}")
        if e.op in COMPARISON_OPS or e.op in LOGICAL_OPS:
            return BOOL
        if e.op in ("<<", ">>"):
            return lhs
        assert e.op in ARITHMETIC_OPS or e.op in BITWISE_OPS
        return promote(lhs, rhs)
    if isinstance(e, Unary):
        if e.op not in UNARY_OPS:
            _fail(f"{ctx.op}: unknown scalar operator {_short(e.op)} in {what}")
        dtype = _sub_expr(ctx, e.operand, what)
        if e.op == "not" and dtype != BOOL:
            _fail(f"{ctx.op}: `not` in {what} needs a bool operand, got {dtype}")
        if e.op == "~" and dtype.is_float:
            _fail(f"{ctx.op}: `~` in {what} needs an integer operand, got {dtype}")
        return BOOL if e.op == "not" else dtype
    if isinstance(e, Select):
        cond = _sub_expr(ctx, e.cond, what)
        if cond != BOOL:
            _fail(f"{ctx.op}: select condition in {what} must be bool, got {cond}")
        return promote(_sub_expr(ctx, e.if_true, what), _sub_expr(ctx, e.if_false, what))
    if isinstance(e, ScalarCast):
        _sub_expr(ctx, e.operand, what)
        return _dtype_field(ctx, e.dtype, f"conversion in {what}")
    _fail(f"{ctx.op}: {what}: unknown expression node {type(e).__name__}")


def check_int_expr(ctx: Context, expr: Any, what: str) -> DataType:
    dtype = check_expr(ctx, expr, what)
    if dtype.is_float or dtype == BOOL:
        _fail(f"{ctx.op}: {what} must be an integer, got {_expr_text(expr)} of type {dtype}")
    return dtype


_FOLD: dict[str, Callable[[int, int], int]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "min": min, "max": max,
}


def const_int(expr: Expr) -> int | None:
    """The value of an integer expression built from constants only (else None).
    Only cheap, total operations are folded (no shifts, no division by zero)."""
    if isinstance(expr, Const):
        v = expr.value
        return v if _is_int(v) else None
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


def _check_offsets(ctx: Context, offsets: Any, target: Tensor, name: str = "offsets"
                   ) -> tuple[Expr, ...]:
    if not isinstance(offsets, tuple):
        _fail(f"{ctx.op}: {name} must be a tuple of integer expressions, got "
              f"{_short(offsets)}")
    if len(offsets) != target.type.ndim:
        _fail(f"{ctx.op}: {len(offsets)} offsets for %{target.name}, which has "
              f"{target.type.ndim} dimensions; give one offset per dimension")
    for i, off in enumerate(offsets):
        check_int_expr(ctx, off, f"offset {i}")
    return offsets


# ---- tensors ------------------------------------------------------------------------------

def _check_tensor_type(ctx: Context, tensor: Tensor) -> None:
    """The rules every tensor's type follows (checked where it is defined)."""
    t = tensor.type
    if not isinstance(t, TensorType):
        _fail(f"{ctx.op}: %{tensor.name} has no tensor type (got {_short(t)})")
    if not isinstance(t.space, MemorySpace):
        _fail(f"{ctx.op}: %{tensor.name} has no memory space (got {_short(t.space)})")
    _dtype_field(ctx, t.dtype, f"%{tensor.name}")
    if not isinstance(t.shape, tuple):
        _fail(f"{ctx.op}: %{tensor.name}'s shape must be a tuple, got {_short(t.shape)}")
    if t.space is G:
        for d, n in enumerate(t.shape):
            if _is_int(n):
                if n < 1:
                    _fail(f"{ctx.op}: %{tensor.name}'s extent {n} (dim {d}) must be >= 1")
            else:
                check_int_expr(ctx, n, f"extent {d} of %{tensor.name}")
        if t.layout is not None:
            _fail(f"{ctx.op}: global tensor %{tensor.name} has a layout; a global view's "
                  "strides are given by global_view")
        return
    for n in t.shape:
        if not _is_int(n) or n < 1:
            _fail(f"{ctx.op}: {t.space.value} tensor %{tensor.name} needs a static shape of "
                  f"positive ints, got {_shape_text(t.shape)}")
    if t.space is R:
        _check_register_layout(ctx, t.layout, tensor)
    else:
        _check_shared_layout(ctx, t.layout, tensor)


def _check_register_layout(ctx: Context, layout: Any, tensor: Tensor) -> None:
    if layout is None:
        return
    if not isinstance(layout, RegisterLayout):
        _fail(f"{ctx.op}: register tensor %{tensor.name}'s layout must be a RegisterLayout, "
              f"got {_short(layout)}")
    if tuple(layout.shape) != tuple(tensor.type.shape):
        _fail(f"{ctx.op}: layout {layout} has shape {_shape_text(layout.shape)} but "
              f"%{tensor.name} is {_shape_text(tensor.type.shape)}; a register layout must "
              "have its tensor's shape")
    if layout.num_threads != ctx.num_threads:
        _fail(f"{ctx.op}: layout {layout} of %{tensor.name} spreads over {layout.num_threads} "
              f"threads but the block has {ctx.num_threads} ({ctx.program.num_warps} warps); "
              "a register layout covers all threads of the block (replicate a small tile)")


def _check_shared_layout(ctx: Context, layout: Any, tensor: Tensor) -> None:
    if layout is None:
        return
    if not isinstance(layout, SharedLayout):
        _fail(f"{ctx.op}: shared tensor %{tensor.name}'s layout must be a SharedLayout, "
              f"got {_short(layout)}")
    if tuple(layout.shape) != tuple(tensor.type.shape):
        _fail(f"{ctx.op}: shared layout {layout} has shape {_shape_text(layout.shape)} but "
              f"%{tensor.name} is {_shape_text(tensor.type.shape)}; a shared layout must "
              "have its tensor's shape")
    if layout.element_bits != tensor.type.dtype.bits:
        _fail(f"{ctx.op}: shared layout {layout} holds {layout.element_bits}-bit elements "
              f"but %{tensor.name} is {tensor.type.dtype} ({tensor.type.dtype.bits} bits)")


def _check_tensor_object(ctx: Context, tensor: Any, what: str) -> Tensor:
    if not isinstance(tensor, Tensor):
        _fail(f"{ctx.op}: {what} must be a tensor, got {_short(tensor)}")
    if type(tensor.name) is not str or not tensor.name:
        _fail(f"{ctx.op}: {what} has no name (got {_short(tensor.name)})")
    return tensor


def define(ctx: Context, inst: Any, space: MemorySpace, what: str = "out") -> Tensor:
    """Check an instruction's result (in `space`) and define it."""
    tensor = _check_tensor_object(ctx, getattr(inst, what), what)
    _check_tensor_type(ctx, tensor)
    if tensor.type.space is not space:
        _fail(f"{ctx.op}: {what} must be a {space.value} tensor, got {tensor.type.space.value} "
              f"tensor %{tensor.name}")
    return tensor


def use(ctx: Context, value: Any, what: str, spaces: tuple[MemorySpace, ...]) -> Tensor:
    """Check a tensor operand: defined, visible, alive, with its defined type, in `spaces`."""
    tensor = _check_tensor_object(ctx, value, what)
    found = ctx.lookup_tensor(tensor.name)
    if found is None:
        where = ctx.gone.get(tensor.name)
        if where:
            _fail(f"{ctx.op}: {what} %{tensor.name} is defined in {where} and not visible "
                  "here; a tensor defined in a loop or branch body lives in that body only")
        _fail(f"{ctx.op}: {what} %{tensor.name} is not defined before it is used")
    if tensor.name in ctx.freed:
        _fail(f"{ctx.op}: {what} %{tensor.name} is used after free_shared "
              f"({ctx.freed[tensor.name]})")
    if tensor.type != found.type:
        _fail(f"{ctx.op}: {what} %{tensor.name} is used as {_type_text(tensor.type)} but was "
              f"defined as {_type_text(found.type)}")
    if found.type.space not in spaces:
        allowed = " or ".join(s.value for s in spaces)
        _fail(f"{ctx.op}: {what} must be a {allowed} tensor, got {found.type.space.value} "
              f"tensor %{tensor.name}")
    return found


def _operand(ctx: Context, value: Any, what: str) -> Tensor | DataType:
    """A register tensor or a scalar expression operand: the tensor, or the scalar's dtype."""
    if isinstance(value, Tensor):
        return use(ctx, value, what, (R,))
    return check_expr(ctx, value, what)


broadcast = broadcast_shapes  # the shared rule (ir/types.py)


def _same_layout(a: Tensor, b: Tensor) -> bool:
    return a.type.layout is None or b.type.layout is None or a.type.layout == b.type.layout


def _check_tile(ctx: Context, tile: Tensor, target: Tensor, offsets: tuple[Expr, ...],
                must_fit: bool, noun: str) -> None:
    """`tile` is read from / written to `target[offsets + i]`: same rank and dtype; for a
    shared target the tile lies inside it."""
    if tile.type.ndim != target.type.ndim:
        _fail(f"{ctx.op}: %{tile.name} is {_shape_text(tile.type.shape)} but %{target.name} "
              f"is {_shape_text(target.type.shape)}; a {noun} needs a tile with the same "
              "number of dimensions")
    if tile.type.dtype != target.type.dtype:
        _fail(f"{ctx.op}: %{tile.name} is {tile.type.dtype} but %{target.name} is "
              f"{target.type.dtype}; a {noun} keeps the dtype (use cast to convert)")
    if not must_fit:
        return
    for d, (n, size) in enumerate(zip(tile.type.shape, target.type.shape)):
        start = const_int(offsets[d])
        if n > size or (start is not None and not 0 <= start <= size - n):
            span = f"[{start}, {start + n})" if start is not None else f"{n} elements"
            _fail(f"{ctx.op}: the tile {span} in dim {d} does not fit in shared tensor "
                  f"%{target.name} of shape {_shape_text(target.type.shape)}")


# ---- instruction checkers -----------------------------------------------------------------

def check_global_view(ctx: Context, inst: ins.GlobalView) -> None:
    ptr = inst.ptr
    if not isinstance(ptr, Pointer):
        _fail(f"global_view: ptr must be a pointer parameter, got {_short(ptr)}")
    param = ctx.pointers.get(ptr.name) if isinstance(ptr.name, str) else None
    if param is None:
        _fail(f"global_view: {ptr.name} is not a pointer parameter of the kernel")
    if param != ptr:
        _fail(f"global_view: pointer {ptr.name} is used as {_short(ptr.type)} but the "
              f"parameter is {param.type}")
    out = define(ctx, inst, G)
    check_int_expr(ctx, inst.offset, "offset")
    if not isinstance(inst.strides, tuple):
        _fail(f"global_view: strides must be a tuple of integer expressions, got "
              f"{_short(inst.strides)}")
    if len(inst.strides) != out.type.ndim:
        _fail(f"global_view: {len(inst.strides)} strides for a view of shape "
              f"{_shape_text(out.type.shape)}; give one stride per dimension")
    for i, stride in enumerate(inst.strides):
        check_int_expr(ctx, stride, f"stride {i}")
    pdt = param.type.dtype
    if out.type.dtype != pdt and out.type.dtype.bits != pdt.bits:
        _fail(f"global_view: %{out.name} is {out.type.dtype} ({out.type.dtype.bits} bits) over "
              f"{param.type} ({pdt.bits} bits); a view's dtype must be the pointer's or one "
              "of the same width")
    ctx.define_tensor(out)
    ctx.view_ptr[out.name] = param


def check_load_global(ctx: Context, inst: ins.LoadGlobal) -> None:
    src = use(ctx, inst.src, "src", (G,))
    out = define(ctx, inst, R)
    offsets = _check_offsets(ctx, inst.offsets, src)
    other = inst.other
    if not isinstance(other, (int, float)) or isinstance(other, bool):
        _fail(f"load_global: other must be a number, got {_short(other)}")
    if not src.type.dtype.is_float and isinstance(other, float):
        _fail(f"load_global: other={other!r} is not an integer but %{src.name} is "
              f"{src.type.dtype}")
    _check_tile(ctx, out, src, offsets, False, "load")
    ctx.define_tensor(out)


def check_store_global(ctx: Context, inst: ins.StoreGlobal) -> None:
    dst = use(ctx, inst.dst, "dst", (G,))
    src = use(ctx, inst.src, "src", (R,))
    offsets = _check_offsets(ctx, inst.offsets, dst)
    _check_writable(ctx, dst)
    _check_tile(ctx, src, dst, offsets, False, "store")


def _check_writable(ctx: Context, dst: Tensor) -> None:
    """A global tensor written to must not view a `const` pointer parameter."""
    ptr = ctx.view_ptr.get(dst.name)
    if ptr is not None and ptr.type.readonly:
        _fail(f"{ctx.op}: store to read-only parameter {ptr.name} (declared "
              f"{ptr.type}) through %{dst.name}")


def check_atomic_add(ctx: Context, inst: ins.AtomicAdd) -> None:
    dst = use(ctx, inst.dst, "dst", (G,))
    if dst.type.dtype != INT32:
        _fail(f"atomic_add: %{dst.name} is {dst.type.dtype}; atomic_add works on int32")
    _check_writable(ctx, dst)
    _check_offsets(ctx, inst.offsets, dst)
    value = check_int_expr(ctx, inst.value, "value")
    if value.bits > 32:
        _fail(f"atomic_add: the value {_expr_text(inst.value)} is {value}; it must fit int32")
    if not isinstance(inst.out, Var) or inst.out.dtype != INT32:
        _fail(f"atomic_add: out must be an int32 scalar variable, got {_short(inst.out)}")
    ctx.declare_var(inst.out, "atomic_add")


def check_alloc_shared(ctx: Context, inst: ins.AllocShared) -> None:
    ctx.define_tensor(define(ctx, inst, S))


def check_free_shared(ctx: Context, inst: ins.FreeShared) -> None:
    tensor = _check_tensor_object(ctx, inst.tensor, "tensor")
    if tensor.name in ctx.freed and ctx.lookup_tensor(tensor.name) is not None:
        _fail(f"free_shared: %{tensor.name} is freed twice ({ctx.freed[tensor.name]})")
    tensor = use(ctx, tensor, "tensor", (S,))
    if ctx.loop_depth.get(tensor.name, 0) < ctx.depth:
        _fail(f"free_shared: %{tensor.name} is allocated outside the loop it is freed in; "
              "the next iteration would use freed memory")
    loc = _loc_of(inst)
    ctx.freed[tensor.name] = f"freed at {loc}" if loc else "freed earlier"


def check_load_shared(ctx: Context, inst: ins.LoadShared) -> None:
    src = use(ctx, inst.src, "src", (S,))
    out = define(ctx, inst, R)
    offsets = _check_offsets(ctx, inst.offsets, src)
    _check_tile(ctx, out, src, offsets, True, "load")
    ctx.define_tensor(out)


def check_store_shared(ctx: Context, inst: ins.StoreShared) -> None:
    dst = use(ctx, inst.dst, "dst", (S,))
    src = use(ctx, inst.src, "src", (R,))
    offsets = _check_offsets(ctx, inst.offsets, dst)
    _check_tile(ctx, src, dst, offsets, True, "store")


def check_copy_async(ctx: Context, inst: ins.CopyAsync) -> None:
    dst = use(ctx, inst.dst, "dst", (S,))
    src = use(ctx, inst.src, "src", (G,))
    offsets = _check_offsets(ctx, inst.offsets, src)
    _check_tile(ctx, dst, src, offsets, False, "copy")
    if not isinstance(inst.multicast, bool):
        _fail(f"copy_async: multicast must be a bool, got {_short(inst.multicast)}")
    if inst.multicast and (ctx.program.cluster == 1 or not ctx.program.producer_warps):
        _fail("copy_async: a multicast copy needs the blocks in clusters (tv.cluster(n), "
              "n > 1) and a producer warp (tv.producer_warp()) to issue it, got cluster="
              f"{ctx.program.cluster}, producer_warps={ctx.program.producer_warps}")


def check_copy_async_commit(ctx: Context, inst: ins.CopyAsyncCommit) -> None:
    pass


def check_copy_async_wait(ctx: Context, inst: ins.CopyAsyncWait) -> None:
    if not _is_int(inst.n) or inst.n < 0:
        _fail(f"copy_async_wait: n (groups left in flight) must be an int >= 0, got "
              f"{_short(inst.n)}")


def check_sync(ctx: Context, inst: ins.Sync) -> None:
    pass


def check_full(ctx: Context, inst: ins.Full) -> None:
    out = define(ctx, inst, R)
    check_expr(ctx, inst.value, "value")
    ctx.define_tensor(out)


def check_assign(ctx: Context, inst: ins.Assign) -> None:
    dst = use(ctx, inst.dst, "dst", (R,))
    src = use(ctx, inst.src, "src", (R,))
    if dst.type.dtype != src.type.dtype or dst.type.shape != src.type.shape \
            or not _same_layout(dst, src):
        _fail(f"assign: %{dst.name} is {_type_text(dst.type)} but %{src.name} is "
              f"{_type_text(src.type)}; assign needs the same type")


def check_view(ctx: Context, inst: ins.View) -> None:
    src = use(ctx, inst.src, "src", (R,))
    out = define(ctx, inst, R)
    for t in (src, out):
        if t.type.layout is None:
            _fail(f"view: %{t.name} has no layout; a view reinterprets each thread's bits, so "
                  "both layouts must be given")
    a, b = src.type.layout, out.type.layout
    if a.num_threads != b.num_threads:
        _fail(f"view: %{src.name} is spread over {a.num_threads} threads but %{out.name} over "
              f"{b.num_threads}; a view keeps every bit in its thread")
    have = a.local_size * src.type.dtype.bits
    want = b.local_size * out.type.dtype.bits
    if have != want:
        _fail(f"view: each thread holds {a.local_size} x {src.type.dtype.bits} = {have} bits of "
              f"%{src.name} but %{out.name} needs {b.local_size} x {out.type.dtype.bits} = "
              f"{want}; a view must preserve bits per thread")
    ctx.define_tensor(out)


def check_cast(ctx: Context, inst: ins.Cast) -> None:
    src = use(ctx, inst.src, "src", (R,))
    out = define(ctx, inst, R)
    if out.type.shape != src.type.shape:
        _fail(f"cast: out is {_shape_text(out.type.shape)} but %{src.name} is "
              f"{_shape_text(src.type.shape)}; cast keeps the shape")
    if not isinstance(inst.exponent, int) or isinstance(inst.exponent, bool):
        _fail(f"cast: exponent must be an int, got {_short(inst.exponent)}")
    if inst.exponent and not (src.type.dtype.is_lowbit and out.type.dtype.is_float):
        _fail(f"cast: an exponent ({inst.exponent}) takes a 1..8-bit source and a float out, "
              f"got {src.type.dtype} -> {out.type.dtype}")
    ctx.define_tensor(out)


def check_elementwise(ctx: Context, inst: ins.Elementwise) -> None:
    op = inst.op
    if op in ins.UNARY_TENSOR_OPS:
        arity = 1
    elif op in ins.BINARY_TENSOR_OPS:
        arity = 2
    elif op in ins.TERNARY_TENSOR_OPS:
        arity = 3
    else:
        _fail(f"elementwise: unknown op {_short(op)}; the ops are "
              f"{', '.join(ins.UNARY_TENSOR_OPS + ins.BINARY_TENSOR_OPS + ins.TERNARY_TENSOR_OPS)}")
    label = f"elementwise {op}"
    ctx.op = label
    if not isinstance(inst.args, tuple):
        _fail(f"{label}: args must be a tuple of operands, got {_short(inst.args)}")
    if len(inst.args) != arity:
        _fail(f"{label} takes {arity} operand(s), got {len(inst.args)}")
    operands = [_operand(ctx, a, f"operand {i}") for i, a in enumerate(inst.args)]
    out = define(ctx, inst, R)
    tensors = [t for t in operands if isinstance(t, Tensor)]
    if not tensors:
        _fail(f"{label}: needs at least one tensor operand (all operands are scalars)")
    dtype = tensors[0].type.dtype
    for t in tensors[1:]:
        if t.type.dtype != dtype:
            _fail(f"{label}: operands %{tensors[0].name} ({dtype}) and %{t.name} "
                  f"({t.type.dtype}) differ in dtype; cast one first")
    for i, scalar in enumerate(operands):
        if isinstance(scalar, DataType) and scalar.is_float and not dtype.is_float:
            _fail(f"{label}: scalar operand {i} is {scalar} but the tensor operands are "
                  f"{dtype}; a float scalar does not convert implicitly to an integer")
    if op in BITWISE_TENSOR_OPS and dtype.is_float:
        _fail(f"{label}: bitwise op on {dtype}; {op} takes integer operands only")
    if op in FLOAT_ONLY_TENSOR_OPS and not dtype.is_float:
        _fail(f"{label}: {op} takes float operands only, got {dtype}")
    shape = broadcast([t.type.shape for t in tensors])
    if shape is None:
        _fail(f"{label}: operand shapes "
              f"{', '.join(_shape_text(t.type.shape) for t in tensors)} do not broadcast")
    if out.type.shape != shape:
        _fail(f"{label}: out is {_shape_text(out.type.shape)} but the operands broadcast to "
              f"{_shape_text(shape)}")
    want = BOOL if op in ins.COMPARISON_TENSOR_OPS else dtype
    if out.type.dtype != want:
        if op in ins.COMPARISON_TENSOR_OPS:
            _fail(f"{label}: a comparison gives bool (uint1), but out is {out.type.dtype}")
        _fail(f"{label}: out is {out.type.dtype} but the operands are {dtype}; the result "
              "has the operands' dtype (cast it to convert)")
    ctx.define_tensor(out)


def check_where(ctx: Context, inst: ins.Where) -> None:
    cond = use(ctx, inst.cond, "cond", (R,))
    x = _operand(ctx, inst.x, "x")
    y = _operand(ctx, inst.y, "y")
    out = define(ctx, inst, R)
    if cond.type.dtype != BOOL:
        _fail(f"where: cond %{cond.name} is {cond.type.dtype}; it must be bool (uint1)")
    tensors = [t for t in (cond, x, y) if isinstance(t, Tensor)]
    for name, v in (("x", x), ("y", y)):
        if isinstance(v, Tensor) and v.type.dtype != out.type.dtype:
            _fail(f"where: {name} %{v.name} is {v.type.dtype} but out is {out.type.dtype}; "
                  "x, y and out share one dtype")
        if isinstance(v, DataType) and v.is_float and not out.type.dtype.is_float:
            _fail(f"where: {name} is a {v} scalar but out is {out.type.dtype}; a float scalar "
                  "does not convert implicitly to an integer")
    shape = broadcast([t.type.shape for t in tensors])
    if shape is None:
        _fail(f"where: shapes {', '.join(_shape_text(t.type.shape) for t in tensors)} do not "
              "broadcast")
    if out.type.shape != shape:
        _fail(f"where: out is {_shape_text(out.type.shape)} but the operands broadcast to "
              f"{_shape_text(shape)}")
    ctx.define_tensor(out)


def check_reduce(ctx: Context, inst: ins.Reduce) -> None:
    if inst.op not in ins.REDUCE_OPS:
        _fail(f"reduce: unknown op {_short(inst.op)}; the ops are {', '.join(ins.REDUCE_OPS)}")
    ctx.op = f"reduce {inst.op}"
    src = use(ctx, inst.src, "src", (R,))
    out = define(ctx, inst, R)
    dim, ndim = inst.dim, src.type.ndim
    if not _is_int(dim):
        _fail(f"{ctx.op}: dim must be an int, got {_short(dim)}")
    if not 0 <= dim < ndim:
        _fail(f"{ctx.op}: dim {dim} is out of range for %{src.name} of shape "
              f"{_shape_text(src.type.shape)} (dims 0..{ndim - 1})")
    if not isinstance(inst.keepdim, bool):
        _fail(f"{ctx.op}: keepdim must be a bool, got {_short(inst.keepdim)}")
    shape = list(src.type.shape)
    if inst.keepdim:
        shape[dim] = 1
    else:
        del shape[dim]
    if out.type.shape != tuple(shape):
        _fail(f"{ctx.op}: out is {_shape_text(out.type.shape)} but reducing dim {dim} of "
              f"{_shape_text(src.type.shape)} gives {_shape_text(shape)}"
              + (" (keepdim)" if inst.keepdim else ""))
    if out.type.dtype != src.type.dtype:
        _fail(f"{ctx.op}: out is {out.type.dtype} but %{src.name} is {src.type.dtype}; a "
              "reduction keeps the dtype")
    ctx.define_tensor(out)


def check_dot(ctx: Context, inst: ins.Dot) -> None:
    b = use(ctx, inst.b, "b", (R, S))  # shared: read by the tensor cores in place
    a = use(ctx, inst.a, "a", (R, S) if b.type.space is S else (R,))  # (shared: both are)
    c = use(ctx, inst.c, "c", (R,))
    out = define(ctx, inst, R)
    for name, t in (("a", a), ("b", b), ("c", c)):
        if t.type.ndim != 2:
            _fail(f"dot: {name} %{t.name} is {_shape_text(t.type.shape)}; dot takes 2-D tiles")
    (m, k), (k2, n), (cm, cn) = a.type.shape, b.type.shape, c.type.shape
    if k != k2:
        _fail(f"dot: a is {_shape_text(a.type.shape)} but b is {_shape_text(b.type.shape)}; "
              "a's columns (k) must equal b's rows")
    if (cm, cn) != (m, n):
        _fail(f"dot: a @ b is [{m}, {n}] but c is {_shape_text(c.type.shape)}; c must be "
              "[a's rows, b's columns]")
    if a.type.dtype != b.type.dtype:
        _fail(f"dot: a is {a.type.dtype} but b is {b.type.dtype}; a and b must have one dtype "
              "(cast one first)")
    accs = DOT_ACCUMULATORS.get(a.type.dtype)
    if accs is None:
        _fail(f"dot: inputs of dtype {a.type.dtype} are not supported; a and b may be "
              f"{', '.join(str(t) for t in DOT_ACCUMULATORS)}")
    if c.type.dtype not in accs:
        _fail(f"dot: c is {c.type.dtype} but {a.type.dtype} inputs accumulate in "
              f"{' or '.join(str(t) for t in accs)}")
    if out.type.dtype != c.type.dtype or out.type.shape != c.type.shape \
            or not _same_layout(out, c):
        _fail(f"dot: out is {_type_text(out.type)} but c is {_type_text(c.type)}; out must "
              "have c's type")
    ctx.define_tensor(out)


def check_annotate_layout(ctx: Context, inst: ins.AnnotateLayout) -> None:
    tensor = use(ctx, inst.tensor, "tensor", (R, S))
    layout = inst.layout
    if tensor.type.space is R:
        _check_register_layout(ctx, layout, tensor)
    else:
        _check_shared_layout(ctx, layout, tensor)
    if layout is None:
        _fail(f"annotate_layout: no layout given for %{tensor.name}")
    if tensor.type.layout is not None and tensor.type.layout != layout:
        _fail(f"annotate_layout: %{tensor.name} already has layout {tensor.type.layout}, which "
              f"the annotation {layout} contradicts")
    earlier = ctx.annotations.get(tensor.name)
    if earlier is not None and earlier != layout:
        _fail(f"annotate_layout: %{tensor.name} was annotated with {earlier} before; the "
              f"annotation {layout} contradicts it")
    ctx.annotations[tensor.name] = layout


def check_print(ctx: Context, inst: ins.Print) -> None:
    if isinstance(inst.value, Tensor):
        use(ctx, inst.value, "value", (R, S))
    else:
        check_expr(ctx, inst.value, "value")
    if not isinstance(inst.message, str):
        _fail(f"print: message must be a string, got {_short(inst.message)}")


def check_assume(ctx: Context, inst: ins.Assume) -> None:
    dtype = check_expr(ctx, inst.cond, "cond")
    if dtype != BOOL:
        _fail(f"assume: the condition {_expr_text(inst.cond)} is {dtype}; it must be bool "
              "(uint1)")


CHECKERS: dict[str, Callable[[Context, Any], None]] = {
    name: globals()[f"check_{name}"] for name in ins.INSTRUCTIONS
}


# ---- statements ---------------------------------------------------------------------------

def _implicitly_converts(src: DataType, dst: DataType) -> bool:
    if src == dst:
        return True
    if dst == BOOL:
        return False
    if dst.is_float:
        return True  # integer -> float, float -> float
    return not src.is_float  # integer -> integer


def _check_for(ctx: Context, stmt: For) -> None:
    ctx.op = "for"
    for name in ("start", "stop", "step"):
        check_int_expr(ctx, getattr(stmt, name), f"loop {name}")
    if const_int(stmt.step) == 0:
        _fail("for: the step is 0; the loop would never end")
    if stmt.unroll is not None and (not _is_int(stmt.unroll) or stmt.unroll < 1):
        _fail(f"for: unroll must be None or an int >= 1, got {_short(stmt.unroll)}")
    if not isinstance(stmt.body, Seq):
        _fail(f"for: the body must be a Seq, got {_short(stmt.body)}")
    if not isinstance(stmt.var, Var) or not isinstance(stmt.var.dtype, DataType) \
            or stmt.var.dtype.is_float or stmt.var.dtype == BOOL:
        _fail(f"for: the loop variable must be an integer Var, got {_short(stmt.var)}")
    scope = _Scope("the for body", _loc_of(stmt))
    ctx.scopes.append(scope)
    ctx.declare_var(stmt.var, "loop")
    ctx.depth += 1
    _check_seq(ctx, stmt.body)
    ctx.depth -= 1
    _close(ctx, ctx.scopes.pop())


def _check_if(ctx: Context, stmt: If) -> None:
    ctx.op = "if"
    dtype = check_expr(ctx, stmt.cond, "the condition")
    if dtype != BOOL:
        _fail(f"if: the condition {_expr_text(stmt.cond)} is {dtype}; it must be bool (uint1) "
              "(compare it, e.g. `x != 0`)")
    if not isinstance(stmt.then_body, Seq):
        _fail(f"if: the then body must be a Seq, got {_short(stmt.then_body)}")
    if stmt.else_body is not None and not isinstance(stmt.else_body, Seq):
        _fail(f"if: the else body must be a Seq or None, got {_short(stmt.else_body)}")
    before = dict(ctx.freed)
    freed = dict(before)
    for kind, body in (("the if body", stmt.then_body), ("the else body", stmt.else_body)):
        if body is None:
            continue
        ctx.freed = dict(before)
        ctx.scopes.append(_Scope(kind, _loc_of(stmt)))
        _check_seq(ctx, body)
        _close(ctx, ctx.scopes.pop())
        freed.update(ctx.freed)
    ctx.freed = freed


def _close(ctx: Context, scope: _Scope) -> None:
    where = scope.kind + (f" at {scope.loc}" if scope.loc else "")
    for name in scope.tensors:
        ctx.gone[name] = where
        ctx.freed.pop(name, None)
    for name in scope.vars:
        ctx.gone["$" + name] = where


def _check_let(ctx: Context, stmt: Let) -> None:
    ctx.op = "let"
    value = check_expr(ctx, stmt.value, "the value")
    if not isinstance(stmt.var, Var):
        _fail(f"let: the variable must be a Var, got {_short(stmt.var)}")
    dtype = _dtype_field(ctx, stmt.var.dtype, f"variable {_short(stmt.var.name)}")
    if not _implicitly_converts(value, dtype):
        _fail(f"let: {stmt.var.name} is {dtype} but the value is {value}, which does not "
              "convert implicitly; convert it explicitly")
    ctx.declare_var(stmt.var, "let")


def _check_assign_var(ctx: Context, stmt: AssignVar) -> None:
    ctx.op = "assign_var"
    var = stmt.var
    if not isinstance(var, Var) or type(var.name) is not str:
        _fail(f"assign_var: the target must be a Var, got {_short(var)}")
    found = ctx.lookup_var(var.name)
    if found is None:
        check_expr(ctx, var, "the target")  # says why (not defined, out of scope, ...)
    declared, origin = found  # type: ignore[misc]
    if origin != "let":
        kind = {"param": "a kernel parameter", "atomic_add": "an atomic_add's result"}.get(
            origin, "a loop variable")
        _fail(f"assign_var: {var.name} is {kind}; only a variable declared by let may be "
              "updated")
    if declared.dtype != var.dtype:
        _fail(f"assign_var: {var.name} is declared as {declared.dtype}, not {_short(var.dtype)}")
    value = check_expr(ctx, stmt.value, "the value")
    if not _implicitly_converts(value, declared.dtype):
        _fail(f"assign_var: {var.name} is {declared.dtype} but the value is {value}, which does "
              "not convert implicitly; convert it explicitly")


def _check_stmt(ctx: Context, stmt: Any) -> None:
    ctx.op = type(stmt).__name__
    try:
        if isinstance(stmt, ins.Instruction):
            opname = getattr(type(stmt), "opname", None)
            checker = CHECKERS.get(opname) if isinstance(opname, str) else None
            if checker is None or ins.INSTRUCTIONS.get(opname) is not type(stmt):
                _fail(f"unknown instruction {type(stmt).__name__} (opname {_short(opname)})")
            ctx.op = opname
            if stmt.loc is not None and not isinstance(stmt.loc, SourceLoc):
                _fail(f"{opname}: loc must be a SourceLoc or None, got {_short(stmt.loc)}")
            checker(ctx, stmt)
        elif isinstance(stmt, Seq):
            _check_seq(ctx, stmt)
        elif isinstance(stmt, For):
            _check_for(ctx, stmt)
        elif isinstance(stmt, If):
            _check_if(ctx, stmt)
        elif isinstance(stmt, Let):
            _check_let(ctx, stmt)
        elif isinstance(stmt, AssignVar):
            _check_assign_var(ctx, stmt)
        else:
            _fail(f"not a statement: {_short(stmt)}")
    except _Fail as exc:
        raise VMError(exc.message, instruction=_statement_text(stmt), loc=_loc_of(stmt)) from None
    except VMError:
        raise
    except RecursionError:
        raise VMError(f"{ctx.op}: malformed statement: nested too deeply",
                      instruction=None, loc=_loc_of(stmt)) from None
    except Exception as exc:  # a malformed object the checks above did not foresee
        raise VMError(f"{ctx.op or 'statement'}: malformed statement "
                      f"({type(exc).__name__}: {exc})",
                      instruction=_statement_text(stmt), loc=_loc_of(stmt)) from None


def _check_seq(ctx: Context, seq: Seq) -> None:
    body = seq.body
    if not isinstance(body, tuple):
        _fail(f"a block's body must be a tuple of statements, got {_short(body)}")
    for stmt in body:
        _check_stmt(ctx, stmt)


# ---- the program --------------------------------------------------------------------------

def _check_header(program: Any) -> Context:
    if not isinstance(program, Program):
        _fail(f"not a Program: {_short(program)}")
    if not isinstance(program.name, str) or not program.name:
        _fail(f"the kernel name must be a non-empty string, got {_short(program.name)}")
    nw = program.num_warps
    if not _is_int(nw) or not 1 <= nw <= MAX_WARPS:
        _fail(f"num_warps must be an int in 1..{MAX_WARPS}, got {_short(nw)}")
    pw = program.producer_warps
    if not _is_int(pw) or pw not in (0, 1, WARPGROUP_WARPS) or nw + pw > MAX_WARPS:
        _fail(f"producer_warps must be 0, 1 or {WARPGROUP_WARPS} (and the block at most "
              f"{MAX_WARPS} warps), got {_short(pw)}")
    pr = program.producer_registers
    if not _is_int(pr) or (pw == WARPGROUP_WARPS) != bool(pr):
        _fail(f"a producer warpgroup ({WARPGROUP_WARPS} producer_warps) comes with "
              f"producer_registers and only with it, got producer_warps={pw}, "
              f"producer_registers={_short(pr)}")
    problem = pr and producer_registers_problem(nw, pr)
    if problem:
        _fail(f"producer_registers: {problem}")
    if not _is_int(program.cluster) or program.cluster not in CLUSTER_SIZES:
        _fail(f"cluster must be one of {', '.join(map(str, CLUSTER_SIZES))} (blocks per "
              f"cluster), got {_short(program.cluster)}")
    converts = program.producer_converts
    if not isinstance(converts, bool) or (converts and (pw != WARPGROUP_WARPS
                                                       or program.cluster != 1)):
        _fail(f"producer_converts is a bool, set only with a producer warpgroup "
              f"({WARPGROUP_WARPS} producer_warps) and cluster 1, got {_short(converts)} "
              f"with producer_warps={pw}, cluster={_short(program.cluster)}")
    if program.producer is not None:
        _fail("the program already has a producer body (the pass split_producer_warp "
              "derives it; verify the program before that pass)")
    if not isinstance(program.params, tuple):
        _fail(f"params must be a tuple, got {_short(program.params)}")
    if not isinstance(program.grid, tuple):
        _fail(f"grid must be a tuple of expressions, got {_short(program.grid)}")
    if not isinstance(program.body, Seq):
        _fail(f"the body must be a Seq, got {_short(program.body)}")
    if not isinstance(program.constants, tuple) or not all(
            isinstance(c, tuple) and len(c) == 2 and all(isinstance(s, str) for s in c)
            for c in program.constants):
        _fail(f"constants must be (name, value) string pairs, got {_short(program.constants)}")
    ctx = Context(program, 32 * nw, len(program.grid), {})
    ctx.scopes.append(_Scope("the kernel", None))
    ctx.op = "kernel"
    names: set[str] = set()
    for p in program.params:
        if not isinstance(p, (Pointer, Var)):
            _fail(f"a parameter must be a pointer or a scalar Var, got {_short(p)}")
        if type(p.name) is not str or not p.name:
            _fail(f"a parameter has no name: {_short(p)}")
        if p.name in names:
            _fail(f"parameter {p.name} is declared twice")
        names.add(p.name)
        if isinstance(p, Pointer):
            if not isinstance(p.type, PointerType) or not isinstance(p.type.dtype, DataType) \
                    or not isinstance(p.type.readonly, bool):
                _fail(f"pointer parameter {p.name} has no valid pointer type "
                      f"(got {_short(p.type)})")
            ctx.pointers[p.name] = p
        else:
            ctx.declare_var(p, "param")
    if not 1 <= len(program.grid) <= 3:
        _fail(f"the grid has {len(program.grid)} dimensions; it must have 1 to 3")
    ctx.grid_rank = 0  # the grid may not use block_idx
    for i, g in enumerate(program.grid):
        check_int_expr(ctx, g, f"grid dimension {i}")
        value = const_int(g)
        if value is not None and value < 1:
            _fail(f"grid dimension {i} is {value}; it must be >= 1")
    ctx.grid_rank = len(program.grid)
    return ctx


def verify(program: Program) -> None:
    """Check every rule of the VM (module docstring); raise `VMError` for the first one
    `program` breaks, with the instruction's text and source location."""
    try:
        ctx = _check_header(program)
    except _Fail as exc:
        raise VMError(exc.message) from None
    except RecursionError:
        raise VMError("kernel: malformed program: nested too deeply") from None
    except Exception as exc:
        raise VMError(f"kernel: malformed program ({type(exc).__name__}: {exc})") from None
    try:
        _check_seq(ctx, program.body)
    except _Fail as exc:  # a malformed top-level body
        raise VMError(exc.message) from None

