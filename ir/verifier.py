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
  - arange: out R of an integer dtype that holds `shape[dim] - 1`; `dim` an int in
    0..ndim-1;
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
  - print: a R or S tensor, or a scalar expression; `message` a string;
  - launch_dependents: anywhere; wait_prerequisites: at the top level of the body (not
    in a loop or branch: every thread waits) and before the program's first global
    write (`store_global`, `atomic_add`, in program order, nested ones included).

Limits (docs/ir.md, "Limits"; the numbers are in `ir.verify_context`)
  - a register tile needs at most 255 32-bit registers a thread (its layout's elements
    per thread, or without a layout its even share of the block, times its bits);
  - a shared tensor takes at most 227 KiB (the largest any target gives a block);
  - a global view's constant extents hold fewer than 2^63 bits, and with a constant
    offset and strides its farthest element's bit address is below 2^63.

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

from typing import Any

from tilevm.dtypes import DataType
from tilevm.ir import instructions as ins
from tilevm.ir.errors import SourceLoc, VMError
from tilevm.ir.expr import BOOL, Var
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
from tilevm.ir.types import Pointer, PointerType
from tilevm.ir.verify_context import (
    Context,
    Fail,
    Scope,
    check_expr,
    check_int_expr,
    const_int,
    dtype_field,
    expr_text,
    fail,
    is_int,
    loc_of,
    short,
    statement_text,
)
from tilevm.ir.verify_instructions import CHECKERS

__all__ = ["verify", "CHECKERS", "MAX_WARPS"]

MAX_WARPS = 32  # 1024 threads, the CUDA limit per block


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
        fail("for: the step is 0; the loop would never end")
    if stmt.unroll is not None and (not is_int(stmt.unroll) or stmt.unroll < 1):
        fail(f"for: unroll must be None or an int >= 1, got {short(stmt.unroll)}")
    if not isinstance(stmt.body, Seq):
        fail(f"for: the body must be a Seq, got {short(stmt.body)}")
    if not isinstance(stmt.var, Var) or not isinstance(stmt.var.dtype, DataType) \
            or stmt.var.dtype.is_float or stmt.var.dtype == BOOL:
        fail(f"for: the loop variable must be an integer Var, got {short(stmt.var)}")
    scope = Scope("the for body", loc_of(stmt))
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
        fail(f"if: the condition {expr_text(stmt.cond)} is {dtype}; it must be bool (uint1) "
              "(compare it, e.g. `x != 0`)")
    if not isinstance(stmt.then_body, Seq):
        fail(f"if: the then body must be a Seq, got {short(stmt.then_body)}")
    if stmt.else_body is not None and not isinstance(stmt.else_body, Seq):
        fail(f"if: the else body must be a Seq or None, got {short(stmt.else_body)}")
    before = dict(ctx.freed)
    freed = dict(before)
    for kind, body in (("the if body", stmt.then_body), ("the else body", stmt.else_body)):
        if body is None:
            continue
        ctx.freed = dict(before)
        ctx.scopes.append(Scope(kind, loc_of(stmt)))
        _check_seq(ctx, body)
        _close(ctx, ctx.scopes.pop())
        freed.update(ctx.freed)
    ctx.freed = freed


def _close(ctx: Context, scope: Scope) -> None:
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
        fail(f"let: the variable must be a Var, got {short(stmt.var)}")
    dtype = dtype_field(ctx, stmt.var.dtype, f"variable {short(stmt.var.name)}")
    if not _implicitly_converts(value, dtype):
        fail(f"let: {stmt.var.name} is {dtype} but the value is {value}, which does not "
              "convert implicitly; convert it explicitly")
    ctx.declare_var(stmt.var, "let")


def _check_assign_var(ctx: Context, stmt: AssignVar) -> None:
    ctx.op = "assign_var"
    var = stmt.var
    if not isinstance(var, Var) or type(var.name) is not str:
        fail(f"assign_var: the target must be a Var, got {short(var)}")
    found = ctx.lookup_var(var.name)
    if found is None:
        check_expr(ctx, var, "the target")  # says why (not defined, out of scope, ...)
    declared, origin = found  # type: ignore[misc]
    if origin != "let":
        kind = {"param": "a kernel parameter", "atomic_add": "an atomic_add's result"}.get(
            origin, "a loop variable")
        fail(f"assign_var: {var.name} is {kind}; only a variable declared by let may be "
              "updated")
    if declared.dtype != var.dtype:
        fail(f"assign_var: {var.name} is declared as {declared.dtype}, not {short(var.dtype)}")
    value = check_expr(ctx, stmt.value, "the value")
    if not _implicitly_converts(value, declared.dtype):
        fail(f"assign_var: {var.name} is {declared.dtype} but the value is {value}, which does "
              "not convert implicitly; convert it explicitly")


def _check_stmt(ctx: Context, stmt: Any) -> None:
    ctx.op = type(stmt).__name__
    try:
        if isinstance(stmt, ins.Instruction):
            opname = getattr(type(stmt), "opname", None)
            checker = CHECKERS.get(opname) if isinstance(opname, str) else None
            if checker is None or ins.INSTRUCTIONS.get(opname) is not type(stmt):
                fail(f"unknown instruction {type(stmt).__name__} (opname {short(opname)})")
            ctx.op = opname
            if stmt.loc is not None and not isinstance(stmt.loc, SourceLoc):
                fail(f"{opname}: loc must be a SourceLoc or None, got {short(stmt.loc)}")
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
            fail(f"not a statement: {short(stmt)}")
    except Fail as exc:
        raise VMError(exc.message, instruction=statement_text(stmt), loc=loc_of(stmt)) from None
    except VMError:
        raise
    except RecursionError:
        raise VMError(f"{ctx.op}: malformed statement: nested too deeply",
                      instruction=None, loc=loc_of(stmt)) from None
    except Exception as exc:  # a malformed object the checks above did not foresee
        raise VMError(f"{ctx.op or 'statement'}: malformed statement "
                      f"({type(exc).__name__}: {exc})",
                      instruction=statement_text(stmt), loc=loc_of(stmt)) from None


def _check_seq(ctx: Context, seq: Seq) -> None:
    body = seq.body
    if not isinstance(body, tuple):
        fail(f"a block's body must be a tuple of statements, got {short(body)}")
    for stmt in body:
        _check_stmt(ctx, stmt)


# ---- the program --------------------------------------------------------------------------

def _check_header(program: Any) -> Context:
    if not isinstance(program, Program):
        fail(f"not a Program: {short(program)}")
    if not isinstance(program.name, str) or not program.name:
        fail(f"the kernel name must be a non-empty string, got {short(program.name)}")
    nw = program.num_warps
    if not is_int(nw) or not 1 <= nw <= MAX_WARPS:
        fail(f"num_warps must be an int in 1..{MAX_WARPS}, got {short(nw)}")
    pw = program.producer_warps
    if not is_int(pw) or pw not in (0, 1, WARPGROUP_WARPS) or nw + pw > MAX_WARPS:
        fail(f"producer_warps must be 0, 1 or {WARPGROUP_WARPS} (and the block at most "
              f"{MAX_WARPS} warps), got {short(pw)}")
    pr = program.producer_registers
    if not is_int(pr) or (pw == WARPGROUP_WARPS) != bool(pr):
        fail(f"a producer warpgroup ({WARPGROUP_WARPS} producer_warps) comes with "
              f"producer_registers and only with it, got producer_warps={pw}, "
              f"producer_registers={short(pr)}")
    problem = pr and producer_registers_problem(nw, pr)
    if problem:
        fail(f"producer_registers: {problem}")
    if not is_int(program.cluster) or program.cluster not in CLUSTER_SIZES:
        fail(f"cluster must be one of {', '.join(map(str, CLUSTER_SIZES))} (blocks per "
              f"cluster), got {short(program.cluster)}")
    converts = program.producer_converts
    if not isinstance(converts, bool) or (converts and (pw != WARPGROUP_WARPS
                                                       or program.cluster != 1)):
        fail(f"producer_converts is a bool, set only with a producer warpgroup "
              f"({WARPGROUP_WARPS} producer_warps) and cluster 1, got {short(converts)} "
              f"with producer_warps={pw}, cluster={short(program.cluster)}")
    if program.producer is not None:
        fail("the program already has a producer body (the pass split_producer_warp "
              "derives it; verify the program before that pass)")
    if not isinstance(program.params, tuple):
        fail(f"params must be a tuple, got {short(program.params)}")
    if not isinstance(program.grid, tuple):
        fail(f"grid must be a tuple of expressions, got {short(program.grid)}")
    if not isinstance(program.body, Seq):
        fail(f"the body must be a Seq, got {short(program.body)}")
    if not isinstance(program.constants, tuple) or not all(
            isinstance(c, tuple) and len(c) == 2 and all(isinstance(s, str) for s in c)
            for c in program.constants):
        fail(f"constants must be (name, value) string pairs, got {short(program.constants)}")
    ctx = Context(program, 32 * nw, len(program.grid), {})
    ctx.scopes.append(Scope("the kernel", None))
    ctx.op = "kernel"
    names: set[str] = set()
    for p in program.params:
        if not isinstance(p, (Pointer, Var)):
            fail(f"a parameter must be a pointer or a scalar Var, got {short(p)}")
        if type(p.name) is not str or not p.name:
            fail(f"a parameter has no name: {short(p)}")
        if p.name in names:
            fail(f"parameter {p.name} is declared twice")
        names.add(p.name)
        if isinstance(p, Pointer):
            if not isinstance(p.type, PointerType) or not isinstance(p.type.dtype, DataType) \
                    or not isinstance(p.type.readonly, bool):
                fail(f"pointer parameter {p.name} has no valid pointer type "
                      f"(got {short(p.type)})")
            ctx.pointers[p.name] = p
        else:
            ctx.declare_var(p, "param")
    try:
        if not 1 <= len(program.grid) <= 3:
            fail(f"the grid has {len(program.grid)} dimensions; it must have 1 to 3")
        ctx.grid_rank = 0  # the grid may not use block_idx
        for i, g in enumerate(program.grid):
            check_int_expr(ctx, g, f"grid dimension {i}")
            value = const_int(g)
            if value is not None and value < 1:
                fail(f"grid dimension {i} is {value}; it must be >= 1")
    except Fail as exc:  # a problem of the grid: at the line that set it
        raise Fail(exc.message, getattr(program, "grid_loc", None)) from None
    ctx.grid_rank = len(program.grid)
    return ctx


def verify(program: Program) -> None:
    """Check every rule of the VM (module docstring); raise `VMError` for the first one
    `program` breaks, with the instruction's text and source location."""
    try:
        ctx = _check_header(program)
    except Fail as exc:
        raise VMError(exc.message, loc=exc.loc) from None
    except RecursionError:
        raise VMError("kernel: malformed program: nested too deeply") from None
    except Exception as exc:
        raise VMError(f"kernel: malformed program ({type(exc).__name__}: {exc})") from None
    try:
        _check_seq(ctx, program.body)
    except Fail as exc:  # a malformed top-level body
        raise VMError(exc.message) from None


