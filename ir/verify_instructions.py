"""The verifier's rule for each instruction: `check_<opname>(ctx, inst)`, one function per
instruction of `ir.instructions`, found by name through `CHECKERS`. The rules are listed
in `ir.verifier`'s docstring; the shared checks are in `ir.verify_context`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tilevm.dtypes import DataType, DTypeError, parse
from tilevm.dtypes.constants import literal_value
from tilevm.ir import instructions as ins
from tilevm.ir.expr import BOOL, INT64, Var
from tilevm.ir.types import Pointer, Tensor
from tilevm.ir.verify_context import (
    INT32,
    MAX_GLOBAL_BITS,
    Context,
    G,
    R,
    S,
    broadcast,
    check_expr,
    check_int_expr,
    check_offsets,
    check_operand,
    check_register_layout,
    check_shared_layout,
    check_tensor_object,
    check_tile,
    const_int,
    define,
    expr_text,
    fail,
    is_int,
    loc_of,
    same_layout,
    shape_text,
    short,
    type_text,
    use,
)

_F32, _F16 = parse("f32"), parse("f16")

#: dot: the input dtypes (a and b alike) and the accumulator dtypes (c, out) each allows.
DOT_ACCUMULATORS: dict[DataType, tuple[DataType, ...]] = {
    **{parse(t): (_F32, _F16) for t in ("f16", "bf16", "f32", "f8e4m3", "f8e5m2")},
    **{parse(t): (INT32,) for t in ("int8", "uint8", "int4", "uint4")},
}

BITWISE_TENSOR_OPS = ("and", "or", "xor", "shl", "shr", "not")
FLOAT_ONLY_TENSOR_OPS = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "fma")


# ---- instruction checkers -----------------------------------------------------------------

def check_global_view(ctx: Context, inst: ins.GlobalView) -> None:
    ptr = inst.ptr
    if not isinstance(ptr, Pointer):
        fail(f"global_view: ptr must be a pointer parameter, got {short(ptr)}")
    param = ctx.pointers.get(ptr.name) if isinstance(ptr.name, str) else None
    if param is None:
        fail(f"global_view: {ptr.name} is not a pointer parameter of the kernel")
    if param != ptr:
        fail(f"global_view: pointer {ptr.name} is used as {short(ptr.type)} but the "
              f"parameter is {param.type}")
    out = define(ctx, inst, G)
    check_int_expr(ctx, inst.offset, "offset")
    if not isinstance(inst.strides, tuple):
        fail(f"global_view: strides must be a tuple of integer expressions, got "
              f"{short(inst.strides)}")
    if len(inst.strides) != out.type.ndim:
        fail(f"global_view: {len(inst.strides)} strides for a view of shape "
              f"{shape_text(out.type.shape)}; give one stride per dimension")
    for i, stride in enumerate(inst.strides):
        check_int_expr(ctx, stride, f"stride {i}")
    _check_view_reach(ctx, inst, out)
    pdt = param.type.dtype
    if out.type.dtype != pdt and out.type.dtype.bits != pdt.bits:
        fail(f"global_view: %{out.name} is {out.type.dtype} ({out.type.dtype.bits} bits) over "
              f"{param.type} ({pdt.bits} bits); a view's dtype must be the pointer's or one "
              "of the same width")
    ctx.define_tensor(out)
    ctx.view_ptr[out.name] = param


def _check_view_reach(ctx: Context, inst: ins.GlobalView, out: Tensor) -> None:
    """Where every extent, stride and the offset are constants, the farthest element's
    bit address fits int64 (the type the view's indexing computes in)."""
    extents = [n if is_int(n) else const_int(n) for n in out.type.shape]
    steps = [const_int(e) for e in (inst.offset, *inst.strides)]
    if None in extents or None in steps:
        return
    reach = abs(steps[0]) + sum((n - 1) * abs(s) for n, s in zip(extents, steps[1:]))
    if (reach + 1) * out.type.dtype.bits > MAX_GLOBAL_BITS:
        fail(f"global_view: %{out.name} reaches element {reach} of {inst.ptr.name}; its bit "
              "address overflows int64")


def check_load_global(ctx: Context, inst: ins.LoadGlobal) -> None:
    src = use(ctx, inst.src, "src", (G,))
    out = define(ctx, inst, R)
    offsets = check_offsets(ctx, inst.offsets, src)
    other = inst.other
    if not isinstance(other, (int, float)) or isinstance(other, bool):
        fail(f"load_global: other must be a number, got {short(other)}")
    try:
        literal_value(other, src.type.dtype)  # a constant of the tile's type (dtypes.constants)
    except DTypeError as err:
        fail(f"load_global: other={other!r} {err} (the type of %{src.name})")
    check_tile(ctx, out, src, offsets, False, "load")
    ctx.define_tensor(out)


def check_store_global(ctx: Context, inst: ins.StoreGlobal) -> None:
    dst = use(ctx, inst.dst, "dst", (G,))
    src = use(ctx, inst.src, "src", (R,))
    offsets = check_offsets(ctx, inst.offsets, dst)
    _check_writable(ctx, inst, dst)
    check_tile(ctx, src, dst, offsets, False, "store")


def _check_writable(ctx: Context, inst: ins.Instruction, dst: Tensor) -> None:
    """A global tensor written to must not view a `const` pointer parameter. Records the
    program's first global write (`wait_prerequisites` must come before it)."""
    ptr = ctx.view_ptr.get(dst.name)
    if ptr is not None and ptr.type.readonly:
        fail(f"{ctx.op}: store to read-only parameter {ptr.name} (declared "
              f"{ptr.type}) through %{dst.name}")
    if not ctx.first_global_write:
        loc = loc_of(inst)
        ctx.first_global_write = ctx.op + (f" at {loc}" if loc else "")


def check_tile_post(ctx: Context, inst: ins.TilePost) -> None:
    _check_tile_sync(ctx, inst)
    _check_writable(ctx, inst, _check_int32_element(ctx, inst, "sem", inst.offsets,
                                                    inst.value, "value",
                                                    "a semaphore is int32"))


def check_tile_wait(ctx: Context, inst: ins.TileWait) -> None:
    _check_tile_sync(ctx, inst)
    _check_int32_element(ctx, inst, "sem", inst.offsets, inst.expected, "expected",
                         "a semaphore is int32")


def _check_tile_sync(ctx: Context, inst: ins.TilePost | ins.TileWait) -> None:
    if ctx.program.producer_warps:
        fail(f"{inst.opname}: a program with a producer warp cannot synchronize tiles "
             f"(its warps would wait apart); write it without tv.producer_warp")


def _check_int32_element(ctx: Context, inst: ins.Instruction, field: str, offsets: Any,
                         count: Any, what: str, rule: str) -> Tensor:
    """The one int32 element of global memory that `atomic_add`, `tile_post` and
    `tile_wait` work on (the tensor in `inst.<field>`; `rule` says why a non-int32 one
    is refused) and the int32 count they add or wait for; returns the tensor."""
    tensor = use(ctx, getattr(inst, field), field, (G,))
    if tensor.type.dtype != INT32:
        fail(f"{inst.opname}: %{tensor.name} is {tensor.type.dtype}; {rule}")
    check_offsets(ctx, offsets, tensor)
    kind = check_int_expr(ctx, count, what)
    if kind.bits > 32:
        fail(f"{inst.opname}: the {what} {expr_text(count)} is {kind}; it must fit int32")
    return tensor


def check_atomic_add(ctx: Context, inst: ins.AtomicAdd) -> None:
    _check_writable(ctx, inst, _check_int32_element(ctx, inst, "dst", inst.offsets,
                                                    inst.value, "value",
                                                    "atomic_add works on int32"))
    if not isinstance(inst.out, Var) or inst.out.dtype != INT32:
        fail(f"atomic_add: out must be an int32 scalar variable, got {short(inst.out)}")
    ctx.declare_var(inst.out, "atomic_add")


def check_globaltimer(ctx: Context, inst: ins.GlobalTimer) -> None:
    if not isinstance(inst.out, Var) or inst.out.dtype != INT64:
        fail(f"globaltimer: out must be an int64 scalar variable, got {short(inst.out)}")
    ctx.declare_var(inst.out, "globaltimer")


def check_alloc_shared(ctx: Context, inst: ins.AllocShared) -> None:
    ctx.define_tensor(define(ctx, inst, S))


def check_free_shared(ctx: Context, inst: ins.FreeShared) -> None:
    tensor = check_tensor_object(ctx, inst.tensor, "tensor")
    if tensor.name in ctx.freed and ctx.lookup_tensor(tensor.name) is not None:
        fail(f"free_shared: %{tensor.name} is freed twice ({ctx.freed[tensor.name]})")
    tensor = use(ctx, tensor, "tensor", (S,))
    if ctx.loop_depth.get(tensor.name, 0) < ctx.depth:
        fail(f"free_shared: %{tensor.name} is allocated outside the loop it is freed in; "
              "the next iteration would use freed memory")
    loc = loc_of(inst)
    ctx.freed[tensor.name] = f"freed at {loc}" if loc else "freed earlier"


def check_load_shared(ctx: Context, inst: ins.LoadShared) -> None:
    src = use(ctx, inst.src, "src", (S,))
    out = define(ctx, inst, R)
    offsets = check_offsets(ctx, inst.offsets, src)
    check_tile(ctx, out, src, offsets, True, "load")
    if inst.peer is not None:
        _check_in_clusters(ctx, "load_shared: a peer's shared memory (peer=)")
        check_int_expr(ctx, inst.peer, "peer")
    ctx.define_tensor(out)


def _check_in_clusters(ctx: Context, what: str) -> None:
    """`what` (a cluster barrier, a peer's shared memory) needs clusters of blocks, and
    every thread of the block at the barriers: no producer warp (it would not meet
    them)."""
    if ctx.program.cluster == 1:
        fail(f"{what} needs the blocks in clusters: tv.cluster(n), n > 1")
    if ctx.program.producer_warps:
        fail(f"{what}: a program with a producer warp cannot meet at cluster barriers "
             "(its warps would wait apart); write it without tv.producer_warp")


def check_store_shared(ctx: Context, inst: ins.StoreShared) -> None:
    dst = use(ctx, inst.dst, "dst", (S,))
    src = use(ctx, inst.src, "src", (R,))
    offsets = check_offsets(ctx, inst.offsets, dst)
    check_tile(ctx, src, dst, offsets, True, "store")


def check_copy_async(ctx: Context, inst: ins.CopyAsync) -> None:
    dst = use(ctx, inst.dst, "dst", (S,))
    src = use(ctx, inst.src, "src", (G,))
    offsets = check_offsets(ctx, inst.offsets, src)
    check_tile(ctx, dst, src, offsets, False, "copy")
    if not isinstance(inst.multicast, bool):
        fail(f"copy_async: multicast must be a bool, got {short(inst.multicast)}")
    if inst.multicast and (ctx.program.cluster == 1 or not ctx.program.producer_warps):
        fail("copy_async: a multicast copy needs the blocks in clusters (tv.cluster(n), "
              "n > 1) and a producer warp (tv.producer_warp()) to issue it, got cluster="
              f"{ctx.program.cluster}, producer_warps={ctx.program.producer_warps}")


def check_copy_async_commit(ctx: Context, inst: ins.CopyAsyncCommit) -> None:
    pass


def check_copy_async_wait(ctx: Context, inst: ins.CopyAsyncWait) -> None:
    if not is_int(inst.n) or inst.n < 0:
        fail(f"copy_async_wait: n (groups left in flight) must be an int >= 0, got "
              f"{short(inst.n)}")


def check_sync(ctx: Context, inst: ins.Sync) -> None:
    pass


def check_cluster_sync(ctx: Context, inst: ins.ClusterSync) -> None:
    _check_in_clusters(ctx, "cluster_sync")


def check_launch_dependents(ctx: Context, inst: ins.LaunchDependents) -> None:
    pass  # anywhere: it only lets the next kernel start; what it reads waits for all


def check_wait_prerequisites(ctx: Context, inst: ins.WaitPrerequisites) -> None:
    # Every thread must wait (a thread that skips it may read memory an earlier kernel
    # is still writing), and no global write may precede it (an earlier kernel may still
    # read or write that memory): so at the top level, before the first global write.
    if len(ctx.scopes) > 1:
        fail(f"wait_prerequisites: it is inside {ctx.scopes[-1].kind}; it must be at the "
              "top level of the kernel's body, where every thread executes it once")
    if ctx.first_global_write:
        fail(f"wait_prerequisites: it comes after a global write ({ctx.first_global_write});"
              " an earlier kernel may still read or write that memory, so the wait must "
              "come before every store_global and atomic_add")


def check_full(ctx: Context, inst: ins.Full) -> None:
    out = define(ctx, inst, R)
    check_expr(ctx, inst.value, "value")
    ctx.define_tensor(out)


def check_arange(ctx: Context, inst: ins.Arange) -> None:
    out = define(ctx, inst, R)
    dim, shape, dtype = inst.dim, out.type.shape, out.type.dtype
    if not is_int(dim):
        fail(f"arange: dim must be an int, got {short(dim)}")
    if not 0 <= dim < len(shape):
        fail(f"arange: dim {dim} is out of range for out of shape {shape_text(shape)} "
              f"(dims 0..{len(shape) - 1})")
    if not dtype.is_integer:
        fail(f"arange: out is {dtype}; an index tile has an integer dtype (cast it to "
              "a float afterwards)")
    if shape[dim] - 1 > dtype.max:
        fail(f"arange: out is {dtype}, which does not hold the index {shape[dim] - 1} of "
              f"dim {dim}")
    ctx.define_tensor(out)


def check_assign(ctx: Context, inst: ins.Assign) -> None:
    dst = use(ctx, inst.dst, "dst", (R,))
    src = use(ctx, inst.src, "src", (R,))
    if dst.type.dtype != src.type.dtype or dst.type.shape != src.type.shape \
            or not same_layout(dst, src):
        fail(f"assign: %{dst.name} is {type_text(dst.type)} but %{src.name} is "
              f"{type_text(src.type)}; assign needs the same type")


def check_view(ctx: Context, inst: ins.View) -> None:
    src = use(ctx, inst.src, "src", (R,))
    out = define(ctx, inst, R)
    for t in (src, out):
        if t.type.layout is None:
            fail(f"view: %{t.name} has no layout; a view reinterprets each thread's bits, so "
                  "both layouts must be given")
    a, b = src.type.layout, out.type.layout
    if a.num_threads != b.num_threads:
        fail(f"view: %{src.name} is spread over {a.num_threads} threads but %{out.name} over "
              f"{b.num_threads}; a view keeps every bit in its thread")
    have = a.local_size * src.type.dtype.bits
    want = b.local_size * out.type.dtype.bits
    if have != want:
        fail(f"view: each thread holds {a.local_size} x {src.type.dtype.bits} = {have} bits of "
              f"%{src.name} but %{out.name} needs {b.local_size} x {out.type.dtype.bits} = "
              f"{want}; a view must preserve bits per thread")
    ctx.define_tensor(out)


def check_cast(ctx: Context, inst: ins.Cast) -> None:
    src = use(ctx, inst.src, "src", (R,))
    out = define(ctx, inst, R)
    if out.type.shape != src.type.shape:
        fail(f"cast: out is {shape_text(out.type.shape)} but %{src.name} is "
              f"{shape_text(src.type.shape)}; cast keeps the shape")
    if not isinstance(inst.exponent, int) or isinstance(inst.exponent, bool):
        fail(f"cast: exponent must be an int, got {short(inst.exponent)}")
    if inst.exponent and not (src.type.dtype.is_lowbit and out.type.dtype.is_float):
        fail(f"cast: an exponent ({inst.exponent}) takes a 1..8-bit source and a float out, "
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
        fail(f"elementwise: unknown op {short(op)}; the ops are "
              f"{', '.join(ins.UNARY_TENSOR_OPS + ins.BINARY_TENSOR_OPS + ins.TERNARY_TENSOR_OPS)}")
    label = f"elementwise {op}"
    ctx.op = label
    if not isinstance(inst.args, tuple):
        fail(f"{label}: args must be a tuple of operands, got {short(inst.args)}")
    if len(inst.args) != arity:
        fail(f"{label} takes {arity} operand(s), got {len(inst.args)}")
    operands = [check_operand(ctx, a, f"operand {i}") for i, a in enumerate(inst.args)]
    out = define(ctx, inst, R)
    tensors = [t for t in operands if isinstance(t, Tensor)]
    if not tensors:
        fail(f"{label}: needs at least one tensor operand (all operands are scalars)")
    dtype = tensors[0].type.dtype
    for t in tensors[1:]:
        if t.type.dtype != dtype:
            fail(f"{label}: operands %{tensors[0].name} ({dtype}) and %{t.name} "
                  f"({t.type.dtype}) differ in dtype; cast one first")
    for i, scalar in enumerate(operands):
        if isinstance(scalar, DataType) and scalar.is_float and not dtype.is_float:
            fail(f"{label}: scalar operand {i} is {scalar} but the tensor operands are "
                  f"{dtype}; a float scalar does not convert implicitly to an integer")
    if op in BITWISE_TENSOR_OPS and dtype.is_float:
        fail(f"{label}: bitwise op on {dtype}; {op} takes integer operands only")
    if op in FLOAT_ONLY_TENSOR_OPS and not dtype.is_float:
        fail(f"{label}: {op} takes float operands only, got {dtype}")
    shape = broadcast([t.type.shape for t in tensors])
    if shape is None:
        fail(f"{label}: operand shapes "
              f"{', '.join(shape_text(t.type.shape) for t in tensors)} do not broadcast")
    if out.type.shape != shape:
        fail(f"{label}: out is {shape_text(out.type.shape)} but the operands broadcast to "
              f"{shape_text(shape)}")
    want = BOOL if op in ins.COMPARISON_TENSOR_OPS else dtype
    if out.type.dtype != want:
        if op in ins.COMPARISON_TENSOR_OPS:
            fail(f"{label}: a comparison gives bool (uint1), but out is {out.type.dtype}")
        fail(f"{label}: out is {out.type.dtype} but the operands are {dtype}; the result "
              "has the operands' dtype (cast it to convert)")
    ctx.define_tensor(out)


def check_where(ctx: Context, inst: ins.Where) -> None:
    cond = use(ctx, inst.cond, "cond", (R,))
    x = check_operand(ctx, inst.x, "x")
    y = check_operand(ctx, inst.y, "y")
    out = define(ctx, inst, R)
    if cond.type.dtype != BOOL:
        fail(f"where: cond %{cond.name} is {cond.type.dtype}; it must be bool (uint1)")
    tensors = [t for t in (cond, x, y) if isinstance(t, Tensor)]
    for name, v in (("x", x), ("y", y)):
        if isinstance(v, Tensor) and v.type.dtype != out.type.dtype:
            fail(f"where: {name} %{v.name} is {v.type.dtype} but out is {out.type.dtype}; "
                  "x, y and out share one dtype")
        if isinstance(v, DataType) and v.is_float and not out.type.dtype.is_float:
            fail(f"where: {name} is a {v} scalar but out is {out.type.dtype}; a float scalar "
                  "does not convert implicitly to an integer")
    shape = broadcast([t.type.shape for t in tensors])
    if shape is None:
        fail(f"where: shapes {', '.join(shape_text(t.type.shape) for t in tensors)} do not "
              "broadcast")
    if out.type.shape != shape:
        fail(f"where: out is {shape_text(out.type.shape)} but the operands broadcast to "
              f"{shape_text(shape)}")
    ctx.define_tensor(out)


def check_reduce(ctx: Context, inst: ins.Reduce) -> None:
    if inst.op not in ins.REDUCE_OPS:
        fail(f"reduce: unknown op {short(inst.op)}; the ops are {', '.join(ins.REDUCE_OPS)}")
    ctx.op = f"reduce {inst.op}"
    src = use(ctx, inst.src, "src", (R,))
    out = define(ctx, inst, R)
    dim, ndim = inst.dim, src.type.ndim
    if not is_int(dim):
        fail(f"{ctx.op}: dim must be an int, got {short(dim)}")
    if not 0 <= dim < ndim:
        fail(f"{ctx.op}: dim {dim} is out of range for %{src.name} of shape "
              f"{shape_text(src.type.shape)} (dims 0..{ndim - 1})")
    if not isinstance(inst.keepdim, bool):
        fail(f"{ctx.op}: keepdim must be a bool, got {short(inst.keepdim)}")
    shape = list(src.type.shape)
    if inst.keepdim:
        shape[dim] = 1
    else:
        del shape[dim]
    if out.type.shape != tuple(shape):
        fail(f"{ctx.op}: out is {shape_text(out.type.shape)} but reducing dim {dim} of "
              f"{shape_text(src.type.shape)} gives {shape_text(shape)}"
              + (" (keepdim)" if inst.keepdim else ""))
    if out.type.dtype != src.type.dtype:
        fail(f"{ctx.op}: out is {out.type.dtype} but %{src.name} is {src.type.dtype}; a "
              "reduction keeps the dtype")
    ctx.define_tensor(out)


def check_dot(ctx: Context, inst: ins.Dot) -> None:
    b = use(ctx, inst.b, "b", (R, S))  # shared: read by the tensor cores in place
    a = use(ctx, inst.a, "a", (R, S) if b.type.space is S else (R,))  # (shared: both are)
    c = use(ctx, inst.c, "c", (R,))
    out = define(ctx, inst, R)
    for name, t in (("a", a), ("b", b), ("c", c)):
        if t.type.ndim != 2 and not (name == "b" and t.type.ndim == 3):
            fail(f"dot: {name} %{t.name} is {shape_text(t.type.shape)}; dot takes 2-D tiles"
                 + (" (b may be [g, k, n] in shared memory)" if name == "b" else ""))
    if b.type.ndim == 3:
        if b.type.space is not S or a.type.space is S:
            fail(f"dot: b %{b.name} holds {b.type.shape[0]} matrices; that takes a shared b "
                 "and a register a (the tensor cores read each block of rows' matrix)")
        groups = b.type.shape[0]
        if not is_int(groups) or groups < 1 or not is_int(a.type.shape[0]) \
                or a.type.shape[0] % groups:
            fail(f"dot: a's {a.type.shape[0]} rows do not split into b's {groups} blocks")
    (m, k), (k2, n), (cm, cn) = a.type.shape, b.type.shape[-2:], c.type.shape
    if k != k2:
        fail(f"dot: a is {shape_text(a.type.shape)} but b is {shape_text(b.type.shape)}; "
              "a's columns (k) must equal b's rows")
    if (cm, cn) != (m, n):
        fail(f"dot: a @ b is [{m}, {n}] but c is {shape_text(c.type.shape)}; c must be "
              "[a's rows, b's columns]")
    if a.type.dtype != b.type.dtype:
        fail(f"dot: a is {a.type.dtype} but b is {b.type.dtype}; a and b must have one dtype "
              "(cast one first)")
    accs = DOT_ACCUMULATORS.get(a.type.dtype)
    if accs is None:
        fail(f"dot: inputs of dtype {a.type.dtype} are not supported; a and b may be "
              f"{', '.join(str(t) for t in DOT_ACCUMULATORS)}")
    if c.type.dtype not in accs:
        fail(f"dot: c is {c.type.dtype} but {a.type.dtype} inputs accumulate in "
              f"{' or '.join(str(t) for t in accs)}")
    if out.type.dtype != c.type.dtype or out.type.shape != c.type.shape \
            or not same_layout(out, c):
        fail(f"dot: out is {type_text(out.type)} but c is {type_text(c.type)}; out must "
              "have c's type")
    ctx.define_tensor(out)


def check_annotate_layout(ctx: Context, inst: ins.AnnotateLayout) -> None:
    tensor = use(ctx, inst.tensor, "tensor", (R, S))
    layout = inst.layout
    if tensor.type.space is R:
        check_register_layout(ctx, layout, tensor)
    else:
        check_shared_layout(ctx, layout, tensor)
    if layout is None:
        fail(f"annotate_layout: no layout given for %{tensor.name}")
    if tensor.type.layout is not None and tensor.type.layout != layout:
        fail(f"annotate_layout: %{tensor.name} already has layout {tensor.type.layout}, which "
              f"the annotation {layout} contradicts")
    earlier = ctx.annotations.get(tensor.name)
    if earlier is not None and earlier != layout:
        fail(f"annotate_layout: %{tensor.name} was annotated with {earlier} before; the "
              f"annotation {layout} contradicts it")
    ctx.annotations[tensor.name] = layout


def check_print(ctx: Context, inst: ins.Print) -> None:
    if isinstance(inst.value, Tensor):
        use(ctx, inst.value, "value", (R, S))
    else:
        check_expr(ctx, inst.value, "value")
    if not isinstance(inst.message, str):
        fail(f"print: message must be a string, got {short(inst.message)}")


def check_assume(ctx: Context, inst: ins.Assume) -> None:
    dtype = check_expr(ctx, inst.cond, "cond")
    if dtype != BOOL:
        fail(f"assume: the condition {expr_text(inst.cond)} is {dtype}; it must be bool "
              "(uint1)")


CHECKERS: dict[str, Callable[[Context, Any], None]] = {
    name: globals()[f"check_{name}"] for name in ins.INSTRUCTIONS
}


