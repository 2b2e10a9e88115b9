"""The verifier (`tilevm.ir.verifier.verify`): valid programs pass; every broken rule is a
`VMError` that names the rule and points at the offending instruction's source line.

The fuzzer takes a valid program (random, from `program_strategies`, or one of the
hand-built ones below), stamps every statement with its own `SourceLoc`, applies one
mutation operator deep in the statement tree (`dataclasses.replace`), and checks that
`verify` raises a `VMError` at the mutated statement whose message names the rule, and
never any other exception, within a time bound.
"""

from __future__ import annotations

import dataclasses
import re
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from program_strategies import ci_examples, valid_programs

from tilevm.dtypes import parse
from tilevm.ir import instructions as ins
from tilevm.ir.builder import Builder
from tilevm.ir.errors import SourceLoc, VMError
from tilevm.ir.expr import BOOL, INT32, Binary, BlockIndex, Const, Var, const
from tilevm.ir.stmt import AssignVar, For, If, Let, Program, Seq
from tilevm.ir.types import MemorySpace, Pointer, PointerType, Tensor, TensorType
from tilevm.ir.verifier import CHECKERS, verify
from tilevm.ir.verify_instructions import DOT_ACCUMULATORS
from tilevm.layouts.register_layout import local, spatial
from tilevm.layouts.shared_layout import row_major, swizzled

R, S, G = MemorySpace.REGISTER, MemorySpace.SHARED, MemorySpace.GLOBAL
TIME_LIMIT_S = 5.0


# ---- hand-built valid programs ------------------------------------------------------------

def gemm_program() -> Program:
    """A tiled f16 GEMM: async copies to shared memory, a loop-carried f32 accumulator."""
    b = Builder("gemm", num_warps=4)
    pa = b.pointer_param("a", "f16", readonly=True)
    pb = b.pointer_param("b", "f16", readonly=True)
    pc = b.pointer_param("c", "f32")
    m, n, k = b.scalar_param("M"), b.scalar_param("N"), b.scalar_param("K")
    b.set_grid(Binary("cdiv", m, const(16)), Binary("cdiv", n, const(16)))
    ga, gb, gc = b.global_view(pa, (m, k)), b.global_view(pb, (k, n)), b.global_view(pc, (m, n))
    sa = b.alloc_shared("f16", (16, 32), row_major((16, 32), "f16"))
    sb = b.alloc_shared("f16", (32, 16), swizzled((32, 16), "f16"))
    acc = b.full(0.0, "f32", (16, 16))
    row = b.let(Binary("*", BlockIndex(0), const(16)), "row")
    col = b.let(Binary("*", BlockIndex(1), const(16)), "col")
    with b.for_range(0, Binary("cdiv", k, const(32)), name="kk") as kk:
        k0 = Binary("*", kk, const(32))
        b.copy_async(sa, ga, (row, k0))
        b.copy_async(sb, gb, (k0, col))
        b.copy_async_commit()
        b.copy_async_wait(0)
        b.sync()
        ra = b.load_shared(sa, (0, 0), (16, 32))
        rb = b.load_shared(sb, (0, 0), (32, 16))
        b.assign(acc, b.dot(ra, rb, acc))
        b.sync()
    b.store_global(gc, acc, (row, col))
    b.free_shared(sa)
    b.free_shared(sb)
    return b.build()


def w4_dequant_program() -> Program:
    """uint8 bytes viewed as packed int4, dequantized, scaled, reduced and compared."""
    b = Builder("w4", num_warps=4)
    pw = b.pointer_param("w", "uint8", readonly=True)
    po = b.pointer_param("out", "f16")
    ps = b.pointer_param("sums", "f32")
    n = b.scalar_param("n")
    scale = b.scalar_param("scale", "f32")
    b.set_grid(Binary("cdiv", n, const(8)))
    gw, go = b.global_view(pw, (n, 64)), b.global_view(po, (n, 128))
    gs = b.global_view(ps, (n,))
    byte_layout = spatial(8, 16) * local(1, 4)
    nib_layout = spatial(8, 16) * local(1, 8)
    row = Binary("*", BlockIndex(0), const(8))
    w = b.load_global(gw, (row, 0), (8, 64), byte_layout)
    q = b.view(w, "int4", (8, 128), nib_layout)
    x = b.cast(q, "f16")
    y = b.elementwise("mul", x, const(0.5, "f16"))
    y2 = b.elementwise("mul", b.cast(y, "f32"), scale)
    pos = b.elementwise("gt", y2, 0.0)
    z = b.where(pos, y2, 0.0)
    sums = b.reduce("sum", z, 1)
    b.annotate_layout(sums, spatial(8).replicated(16))
    b.store_global(go, b.cast(z, "f16"), (row, 0))
    b.store_global(gs, sums, (row,))
    return b.build()


def control_flow_program() -> Program:
    """Lets, loop-carried scalars and tiles, nested if/else, prints."""
    b = Builder("flow", num_warps=1)
    px = b.pointer_param("x", "int32")
    n = b.scalar_param("n")
    b.set_grid(n)
    gx = b.global_view(px, (n, 32))
    total = b.let(0, "total")
    acc = b.full(0, "int32", (1, 32), spatial(1, 32))
    with b.for_range(0, n, name="i") as i:
        t = b.load_global(gx, (i, 0), (1, 32), spatial(1, 32))
        with b.if_then(Binary("==", Binary("%", i, const(2)), const(0))):
            b.assign(acc, b.elementwise("add", acc, t))
        with b.otherwise():
            b.assign(acc, b.elementwise("xor", acc, t))
            b.assign_var(total, Binary("+", total, i))
        b.print(total, "total = ")
    b.print(acc, "acc")
    b.store_global(gx, acc, (0, 0))
    return b.build()


HAND_BUILT = {"gemm": gemm_program, "w4_dequant": w4_dequant_program,
              "control_flow": control_flow_program}


@pytest.mark.parametrize("name", sorted(HAND_BUILT))
def test_hand_built_programs_verify(name: str) -> None:
    verify(HAND_BUILT[name]())
    verify(stamp(HAND_BUILT[name]()))


@settings(max_examples=ci_examples(50))
@given(valid_programs())
def test_random_valid_programs_verify(program: Program) -> None:
    with time_limit():
        verify(program)


def test_every_instruction_has_a_checker() -> None:
    assert set(CHECKERS) == set(ins.INSTRUCTIONS)
    for name, checker in CHECKERS.items():
        assert checker.__name__ == f"check_{name}"


# ---- program surgery ----------------------------------------------------------------------

@contextmanager
def time_limit(seconds: float = TIME_LIMIT_S) -> Iterator[None]:
    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"verify took more than {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


STMT_TYPES = (ins.Instruction, For, If, Let, AssignVar)


def map_seq(seq: Seq, fn: Callable[[Any], tuple[Any, ...]]) -> Seq:
    """Rebuild `seq` with every statement (depth first, outer before inner) replaced by
    `fn(stmt)`, a tuple of statements."""
    out: list[Any] = []
    for stmt in seq.body:
        if isinstance(stmt, For):
            stmt = replace(stmt, body=map_seq(stmt.body, fn))
        elif isinstance(stmt, If):
            stmt = replace(stmt, then_body=map_seq(stmt.then_body, fn),
                           else_body=None if stmt.else_body is None
                           else map_seq(stmt.else_body, fn))
        elif isinstance(stmt, Seq):
            out.append(map_seq(stmt, fn))
            continue
        out.extend(fn(stmt))
    return replace(seq, body=tuple(out))


def stamp(program: Program) -> Program:
    """Give every statement its own source line, numbered in program order."""
    counter = iter(range(1, 10**9))

    def pre(seq: Seq) -> Seq:
        out = []
        for stmt in seq.body:
            stmt = replace(stmt, loc=SourceLoc("prog.py", next(counter)))
            if isinstance(stmt, For):
                stmt = replace(stmt, body=pre(stmt.body))
            elif isinstance(stmt, If):
                stmt = replace(stmt, then_body=pre(stmt.then_body),
                               else_body=None if stmt.else_body is None else pre(stmt.else_body))
            out.append(stmt)
        return replace(seq, body=tuple(out))

    return replace(program, body=pre(program.body))


def at(program: Program, loc: SourceLoc, fn: Callable[[Any], tuple[Any, ...]]) -> Program:
    """`program` with the statement at `loc` replaced by `fn(stmt)`."""
    return replace(program, body=map_seq(
        program.body, lambda s: fn(s) if s.loc == loc else (s,)))


def replace_everywhere(node: Any, old: Any, new: Any) -> Any:
    """`node` with every sub-object equal to `old` replaced by `new`."""
    if node == old and type(node) is type(old):
        return new
    if isinstance(node, tuple):
        return tuple(replace_everywhere(v, old, new) for v in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type) \
            and isinstance(node, (Program, Seq, For, If, Let, AssignVar, ins.Instruction)):
        changes = {f.name: replace_everywhere(getattr(node, f.name), old, new)
                   for f in dataclasses.fields(node) if f.init}
        return replace(node, **changes)
    return node


_new_lines = iter(range(100_000, 10**9))


def new_loc() -> SourceLoc:
    return SourceLoc("mutation.py", next(_new_lines))


@dataclass
class Site:
    """A statement, with what is visible just before it."""

    stmt: Any
    tensors: dict[str, Tensor]  # visible, alive
    seq_siblings: tuple[Any, ...]  # the statements before it in its block
    parents: tuple[Any, ...]  # enclosing For/If statements, outermost first


def walk(program: Program) -> list[Site]:
    sites: list[Site] = []

    def go(seq: Seq, visible: dict[str, Tensor], parents: tuple[Any, ...]) -> None:
        visible = dict(visible)
        for i, stmt in enumerate(seq.body):
            sites.append(Site(stmt, dict(visible), seq.body[:i], parents))
            if isinstance(stmt, For):
                go(stmt.body, visible, parents + (stmt,))
            elif isinstance(stmt, If):
                go(stmt.then_body, visible, parents + (stmt,))
                if stmt.else_body is not None:
                    go(stmt.else_body, visible, parents + (stmt,))
            elif isinstance(stmt, ins.FreeShared):
                visible.pop(stmt.tensor.name, None)
            elif isinstance(stmt, ins.Instruction) and stmt.output is not None:
                visible[stmt.output.name] = stmt.output

    go(program.body, {}, ())
    return sites


def instructions(program: Program) -> list[Site]:
    return [s for s in walk(program) if isinstance(s.stmt, ins.Instruction)]


TENSOR_FIELDS = ("src", "dst", "a", "b", "c", "cond", "x", "y", "tensor", "value")
ALLOWED_SPACES = {
    ("load_global", "src"): (G,), ("store_global", "dst"): (G,),
    ("store_global", "src"): (R,), ("load_shared", "src"): (S,), ("store_shared", "dst"): (S,),
    ("store_shared", "src"): (R,), ("copy_async", "dst"): (S,), ("copy_async", "src"): (G,),
    ("free_shared", "tensor"): (S,), ("assign", "dst"): (R,), ("assign", "src"): (R,),
    ("view", "src"): (R,), ("cast", "src"): (R,), ("where", "cond"): (R,), ("where", "x"): (R,),
    ("where", "y"): (R,), ("reduce", "src"): (R,), ("dot", "a"): (R,), ("dot", "b"): (R, S),
    ("dot", "c"): (R,), ("annotate_layout", "tensor"): (R, S), ("print", "value"): (R, S),
}


def tensor_operands(inst: ins.Instruction) -> list[tuple[str, int | None, Tensor]]:
    """(field, index in a tuple field or None, tensor) for every tensor operand."""
    found: list[tuple[str, int | None, Tensor]] = []
    for name in TENSOR_FIELDS:
        value = getattr(inst, name, None)
        if isinstance(value, Tensor):
            found.append((name, None, value))
    if isinstance(inst, ins.Elementwise):
        found += [("args", i, a) for i, a in enumerate(inst.args) if isinstance(a, Tensor)]
    return found


def set_operand(inst: ins.Instruction, name: str, index: int | None, value: Any
                ) -> ins.Instruction:
    if index is None:
        return replace(inst, **{name: value})
    items = list(getattr(inst, name))
    items[index] = value
    return replace(inst, **{name: tuple(items)})


def with_type(t: Tensor, **changes: Any) -> Tensor:
    return Tensor(t.name, replace(t.type, **changes))


# ---- mutation operators -------------------------------------------------------------------
# Each takes a stamped valid program and a hypothesis `draw`, and returns
# (mutated program, loc of the statement the error must point at, regex of the message),
# or None when the program has no site for it.

Mutation = tuple[Program, SourceLoc, str]
OTHER_DTYPES = ("f16", "bf16", "f32", "int8", "uint8", "int4", "int32", "uint1", "f8e4m3")


def pick(draw: Any, items: list[Any]) -> Any:
    return draw(st.sampled_from(items)) if items else None


def other_dtype(draw: Any, dtype: Any, pred: Callable[[Any], bool] = lambda t: True) -> Any:
    return draw(st.sampled_from([parse(t) for t in OTHER_DTYPES
                                 if parse(t) != dtype and pred(parse(t))]))


def mutate_out_dtype(p: Program, draw: Any) -> Mutation | None:
    def fixed(s: Site) -> bool:
        i = s.stmt
        if isinstance(i, ins.Where):
            return isinstance(i.x, Tensor) or isinstance(i.y, Tensor)
        return isinstance(i, (ins.LoadGlobal, ins.LoadShared, ins.Elementwise, ins.Reduce,
                              ins.Dot, ins.View))
    site = pick(draw, [s for s in instructions(p) if fixed(s)])
    if site is None:
        return None
    inst = site.stmt
    if isinstance(inst, ins.View):
        old = inst.out.dtype
        dtype = other_dtype(draw, old, lambda t: t.bits != old.bits)
    else:
        dtype = other_dtype(draw, inst.out.dtype)
    fragment = {"load_global": "a load keeps the dtype", "load_shared": "a load keeps the dtype",
                "reduce": "a reduction keeps the dtype", "dot": "out must have c's type",
                "where": "x, y and out share one dtype",
                "view": "a view must preserve bits per thread"}.get(inst.opname)
    if isinstance(inst, ins.Elementwise):
        fragment = ("a comparison gives bool" if inst.op in ins.COMPARISON_TENSOR_OPS
                    else "the result has the operands' dtype")
    new = replace(inst, out=with_type(inst.out, dtype=dtype))
    return at(p, inst.loc, lambda s: (new,)), inst.loc, fragment


def mutate_out_shape(p: Program, draw: Any) -> Mutation | None:
    kinds = (ins.Elementwise, ins.Cast, ins.Reduce, ins.Dot, ins.Where)
    site = pick(draw, [s for s in instructions(p) if isinstance(s.stmt, kinds)])
    if site is None:
        return None
    inst = site.stmt
    shape = inst.out.type.shape
    if draw(st.booleans()) or not shape:
        new_shape = shape + (2,)
    else:
        new_shape = (shape[0] * 2,) + shape[1:]
    fragment = {"elementwise": "but the operands broadcast to", "cast": "cast keeps the shape",
                "reduce": "but reducing dim", "dot": "out must have c's type",
                "where": "but the operands broadcast to"}[inst.opname]
    new = replace(inst, out=with_type(inst.out, shape=new_shape, layout=None))
    return at(p, inst.loc, lambda s: (new,)), inst.loc, fragment


def mutate_view_layout(p: Program, draw: Any) -> Mutation | None:
    site = pick(draw, [s for s in instructions(p) if isinstance(s.stmt, ins.View)])
    if site is None:
        return None
    inst = site.stmt
    if draw(st.booleans()):
        new = replace(inst, out=with_type(inst.out, layout=None))
        fragment = "both layouts must be given"
    else:  # twice the elements per thread at the same width: twice the bits
        layout = inst.out.layout * local(*([1] * (len(inst.out.shape) - 1)), 2)
        new = replace(inst, out=with_type(inst.out, shape=layout.shape, layout=layout))
        fragment = "a view must preserve bits per thread"
    return at(p, inst.loc, lambda s: (new,)), inst.loc, fragment


def mutate_use_after_free(p: Program, draw: Any) -> Mutation | None:
    """Free a shared tensor right after its alloc: its first use is then the error."""
    sites = instructions(p)
    allocs = [i for i, s in enumerate(sites) if isinstance(s.stmt, ins.AllocShared)]
    options = []
    for i in allocs:
        name = sites[i].stmt.out.name
        first = next((s.stmt for s in sites[i + 1:]
                      if any(t.name == name for _, _, t in tensor_operands(s.stmt))), None)
        if first is not None:
            options.append((sites[i].stmt, first))
    choice = pick(draw, options)
    if choice is None:
        return None
    alloc, first = choice
    free = ins.FreeShared(tensor=alloc.out, loc=new_loc())
    return (at(p, alloc.loc, lambda s: (s, free)), first.loc,
            "used after free_shared|is freed twice")


def mutate_double_free(p: Program, draw: Any) -> Mutation | None:
    site = pick(draw, [s for s in instructions(p) if isinstance(s.stmt, ins.FreeShared)])
    if site is None:
        return None
    again = ins.FreeShared(tensor=site.stmt.tensor, loc=new_loc())
    return at(p, site.stmt.loc, lambda s: (s, again)), again.loc, "freed twice"


def mutate_dot_k(p: Program, draw: Any) -> Mutation | None:
    site = pick(draw, [s for s in instructions(p) if isinstance(s.stmt, ins.Dot)])
    if site is None:
        return None
    inst = site.stmt
    k, n = inst.b.shape
    bad = Tensor("bad_b", TensorType(R, inst.b.dtype, (k * 2, n)))
    full = ins.Full(out=bad, value=const(0), loc=new_loc())
    new = replace(inst, b=bad)
    return (at(p, inst.loc, lambda s: (full, new)), inst.loc,
            re.escape("a's columns (k) must equal b's rows"))


def mutate_readonly_store(p: Program, draw: Any) -> Mutation | None:
    views: dict[str, Pointer] = {}
    stores: list[tuple[ins.StoreGlobal, Pointer]] = []
    for s in instructions(p):
        if isinstance(s.stmt, ins.GlobalView):
            views[s.stmt.out.name] = s.stmt.ptr
        elif isinstance(s.stmt, ins.StoreGlobal):
            stores.append((s.stmt, views[s.stmt.dst.name]))
    if not stores:
        return None
    _, ptr = pick(draw, stores)
    first = next(store for store, q in stores if q == ptr)  # the first store through it
    const_ptr = Pointer(ptr.name, PointerType(ptr.type.dtype, readonly=True))
    mutated = replace_everywhere(p, ptr, const_ptr)
    return mutated, first.loc, f"store to read-only parameter {re.escape(ptr.name)}"


def mutate_undefined_tensor(p: Program, draw: Any) -> Mutation | None:
    site = pick(draw, [s for s in instructions(p) if tensor_operands(s.stmt)])
    if site is None:
        return None
    name, index, t = pick(draw, tensor_operands(site.stmt))
    ghost = Tensor("ghost", t.type)
    new = set_operand(site.stmt, name, index, ghost)
    return at(p, site.stmt.loc, lambda s: (new,)), site.stmt.loc, "%ghost is not defined"


def mutate_operand_type(p: Program, draw: Any) -> Mutation | None:
    site = pick(draw, [s for s in instructions(p) if tensor_operands(s.stmt)])
    if site is None:
        return None
    name, index, t = pick(draw, tensor_operands(site.stmt))
    new = set_operand(site.stmt, name, index, with_type(t, dtype=other_dtype(draw, t.dtype)))
    return (at(p, site.stmt.loc, lambda s: (new,)), site.stmt.loc,
            f"%{re.escape(t.name)} is used as .* but was defined as")


def mutate_memory_space(p: Program, draw: Any) -> Mutation | None:
    options = []
    for s in instructions(p):
        for name, index, _ in tensor_operands(s.stmt):
            allowed = (R,) if name == "args" else ALLOWED_SPACES.get((s.stmt.opname, name))
            if allowed is None:
                continue
            if isinstance(s.stmt, ins.FreeShared):
                continue  # a free of a non-shared tensor is covered in unit tests
            wrong = [v for v in s.tensors.values() if v.space not in allowed]
            options += [(s, name, index, v, allowed) for v in wrong]
    choice = pick(draw, options)
    if choice is None:
        return None
    site, name, index, value, allowed = choice
    new = set_operand(site.stmt, name, index, value)
    label = f"operand {index}" if name == "args" else name
    spaces = " or ".join(a.value for a in allowed)
    return (at(p, site.stmt.loc, lambda s: (new,)), site.stmt.loc,
            f"{label} must be a {spaces} tensor, got {value.space.value} tensor")


OFFSET_USERS = (ins.LoadGlobal, ins.StoreGlobal, ins.LoadShared, ins.StoreShared, ins.CopyAsync)


def mutate_undefined_var(p: Program, draw: Any) -> Mutation | None:
    site = pick(draw, [s for s in instructions(p) if isinstance(s.stmt, OFFSET_USERS)])
    if site is None:
        return None
    offsets = list(site.stmt.offsets)
    i = draw(st.integers(0, len(offsets) - 1))
    offsets[i] = Binary("+", offsets[i], Var("nowhere", INT32))
    new = replace(site.stmt, offsets=tuple(offsets))
    return (at(p, site.stmt.loc, lambda s: (new,)), site.stmt.loc,
            "uses variable nowhere, which is not defined")


def mutate_offset_count(p: Program, draw: Any) -> Mutation | None:
    site = pick(draw, [s for s in instructions(p) if isinstance(s.stmt, OFFSET_USERS)])
    if site is None:
        return None
    offsets = site.stmt.offsets
    offsets = offsets[:-1] if offsets and draw(st.booleans()) else offsets + (const(0),)
    new = replace(site.stmt, offsets=offsets)
    return (at(p, site.stmt.loc, lambda s: (new,)), site.stmt.loc,
            "give one offset per dimension")


def mutate_reduce_dim(p: Program, draw: Any) -> Mutation | None:
    site = pick(draw, [s for s in instructions(p) if isinstance(s.stmt, ins.Reduce)])
    if site is None:
        return None
    ndim = len(site.stmt.src.shape)
    dim = draw(st.one_of(st.integers(ndim, ndim + 5), st.integers(-5, -1)))
    new = replace(site.stmt, dim=dim)
    return (at(p, site.stmt.loc, lambda s: (new,)), site.stmt.loc,
            f"dim {dim} is out of range")


def mutate_unknown_op(p: Program, draw: Any) -> Mutation | None:
    site = pick(draw, [s for s in instructions(p) if isinstance(s.stmt, ins.Elementwise)])
    if site is None:
        return None
    op = draw(st.sampled_from(["frobnicate", "pow", "ADD", "", "sum"]))
    new = replace(site.stmt, op=op)
    return at(p, site.stmt.loc, lambda s: (new,)), site.stmt.loc, "unknown op"


def mutate_escape_scope(p: Program, draw: Any) -> Mutation | None:
    options = []
    for s in walk(p):
        bodies = ([s.stmt.body] if isinstance(s.stmt, For) else
                  [s.stmt.then_body] + ([s.stmt.else_body] if s.stmt.else_body else [])
                  if isinstance(s.stmt, If) else [])
        for body in bodies:
            options += [(s.stmt, i.output) for i in body.body
                        if isinstance(i, ins.Instruction) and i.output is not None]
    choice = pick(draw, options)
    if choice is None:
        return None
    block, tensor = choice
    leak = ins.Print(value=tensor, message="leak", loc=new_loc())
    return (at(p, block.loc, lambda s: (s, leak)), leak.loc,
            f"%{re.escape(tensor.name)} is defined in the (for|if|else) body")


def mutate_if_condition(p: Program, draw: Any) -> Mutation | None:
    site = pick(draw, [s for s in walk(p) if isinstance(s.stmt, If)])
    if site is None:
        return None
    cond = draw(st.sampled_from([const(1), const(0.5), Binary("+", const(1), const(2))]))
    new = replace(site.stmt, cond=cond)
    return at(p, site.stmt.loc, lambda s: (new,)), site.stmt.loc, "it must be bool"


def mutate_loop_bound(p: Program, draw: Any) -> Mutation | None:
    site = pick(draw, [s for s in walk(p) if isinstance(s.stmt, For)])
    if site is None:
        return None
    which = draw(st.sampled_from(["start", "stop", "step"]))
    new = replace(site.stmt, **{which: const(2.5)})
    return (at(p, site.stmt.loc, lambda s: (new,)), site.stmt.loc,
            f"loop {which} must be an integer")


def mutate_assign_loop_var(p: Program, draw: Any) -> Mutation | None:
    site = pick(draw, [s for s in walk(p) if isinstance(s.stmt, For)])
    if site is None:
        return None
    loop = site.stmt
    bump = AssignVar(var=loop.var, value=Binary("+", loop.var, const(1)), loc=new_loc())
    new = replace(loop, body=replace(loop.body, body=(bump,) + loop.body.body))
    return (at(p, loop.loc, lambda s: (new,)), bump.loc,
            "is a loop variable; only a variable declared by let may be updated")


def mutate_wrong_python_type(p: Program, draw: Any) -> Mutation | None:
    options: list[tuple[ins.Instruction, str, Any, str]] = []
    for s in instructions(p):
        i = s.stmt
        if i.output is not None:
            options.append((i, "out", "r0", "out must be a tensor"))
            options.append((i, "out", with_type(i.output, shape=list(i.output.shape)),
                            "shape must be a tuple|static shape"))
        for name, index, _ in tensor_operands(i):
            if index is None:
                options.append((i, name, 3, f"{name} must be a"))
        if isinstance(i, OFFSET_USERS):
            options.append((i, "offsets", list(i.offsets), "offsets must be a tuple"))
            options.append((i, "offsets", (Const("0", INT32),) + i.offsets[1:],
                            "is not a number"))
        if isinstance(i, ins.Reduce):
            options.append((i, "dim", str(i.dim), "dim must be an int"))
            options.append((i, "keepdim", 1, "keepdim must be a bool"))
        if isinstance(i, ins.CopyAsyncWait):
            options.append((i, "n", "0", "must be an int >= 0"))
        if isinstance(i, ins.Print):
            options.append((i, "message", 7, "message must be a string"))
        if isinstance(i, ins.Full):
            options.append((i, "value", 1.5, "value must be a scalar expression"))
        if isinstance(i, ins.GlobalView):
            options.append((i, "strides", list(i.strides), "strides must be a tuple"))
            options.append((i, "ptr", "x", "ptr must be a pointer"))
        if isinstance(i, ins.Elementwise):
            options.append((i, "op", None, "unknown op"))
            options.append((i, "args", list(i.args), "args must be a tuple"))
    choice = pick(draw, options)
    if choice is None:
        return None
    inst, name, value, fragment = choice
    new = replace(inst, **{name: value})
    return at(p, inst.loc, lambda s: (new,)), inst.loc, fragment


MUTATIONS: dict[str, Callable[[Program, Any], Mutation | None]] = {
    f.__name__.removeprefix("mutate_"): f for f in (
        mutate_out_dtype, mutate_out_shape, mutate_view_layout, mutate_use_after_free,
        mutate_double_free, mutate_dot_k, mutate_readonly_store, mutate_undefined_tensor,
        mutate_operand_type, mutate_memory_space, mutate_undefined_var, mutate_offset_count,
        mutate_reduce_dim, mutate_unknown_op, mutate_escape_scope, mutate_if_condition,
        mutate_loop_bound, mutate_assign_loop_var, mutate_wrong_python_type)
}


def check_mutation(mutation: Mutation) -> None:
    program, loc, fragment = mutation
    with time_limit():
        try:
            verify(program)
        except VMError as err:
            assert type(err) is VMError
            assert err.loc == loc, f"error at {err.loc}, expected {loc}: {err}"
            assert re.search(fragment, err.message), f"{fragment!r} not in: {err.message}"
            return
    pytest.fail(f"no VMError; expected {fragment!r} at {loc}")


def _apply_some(program: Program, data: Any) -> Mutation:
    """Apply a uniformly drawn mutation operator, or the next one that has a site."""
    names = sorted(MUTATIONS)
    start = data.draw(st.integers(0, len(names) - 1), label="first mutation tried")
    for name in names[start:] + names[:start]:
        mutation = MUTATIONS[name](program, data.draw)
        if mutation is not None:
            data.draw(st.just(name), label="mutation")
            return mutation
    assume(False)
    raise AssertionError  # unreachable


hand_built = st.sampled_from(sorted(HAND_BUILT)).map(lambda n: stamp(HAND_BUILT[n]()))
programs = st.one_of(hand_built, valid_programs().map(stamp))


@settings(max_examples=ci_examples(50),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(programs, st.data())
def test_fuzz_mutations_are_caught_at_the_mutated_instruction(program: Program,
                                                                data: Any) -> None:
    check_mutation(_apply_some(program, data))


@pytest.mark.parametrize("name", sorted(MUTATIONS))
@settings(max_examples=max(5, settings.default.max_examples // 8),
          suppress_health_check=[HealthCheck.too_slow])
@given(program=programs, data=st.data())
def test_each_mutation_operator(name: str, program: Program, data: Any) -> None:
    """Every operator, on a random program when it has a site for it, else on a hand-built
    one (each operator has a site in at least one of those)."""
    mutation = MUTATIONS[name](program, data.draw)
    if mutation is None:
        for program_name in data.draw(st.permutations(sorted(HAND_BUILT))):
            mutation = MUTATIONS[name](stamp(HAND_BUILT[program_name]()), data.draw)
            if mutation is not None:
                break
        else:
            pytest.fail(f"no hand-built program has a site for the {name} mutation")
    check_mutation(mutation)


# ---- garbage in any field: only VMError, never a hang --------------------------------------

garbage = st.one_of(
    st.none(), st.integers(-3, 3), st.floats(allow_nan=True), st.text(max_size=3),
    st.lists(st.integers(0, 3), max_size=3), st.tuples(st.integers(0, 3)), st.booleans(),
    st.just(const(1)), st.just(const(1.5)), st.just(Var("zz", INT32)),
    st.just(Tensor("zz", TensorType(R, INT32, (4,)))), st.just(object()), st.just(parse("f16")),
    st.just(TensorType(R, INT32, (4,))), st.just(Seq()),
)


@settings(max_examples=max(10, settings.default.max_examples // 2))
@given(programs, st.data())
def test_garbage_fields_raise_only_vm_errors(program: Program, data: Any) -> None:
    sites = [s for s in walk(program)]
    site = data.draw(st.sampled_from(sites))
    stmt = site.stmt
    names = [f.name for f in dataclasses.fields(stmt) if f.init]
    name = data.draw(st.sampled_from(names))
    value = data.draw(garbage)
    mutated = at(program, stmt.loc, lambda s: (replace(s, **{name: value}),))
    with time_limit():
        try:
            verify(mutated)
        except VMError:
            pass


@given(st.one_of(garbage, st.builds(Program, st.text(max_size=3), garbage, garbage, garbage,
                                    garbage)))
def test_garbage_programs_raise_only_vm_errors(program: Any) -> None:
    with time_limit():
        with pytest.raises(VMError):
            verify(program)


def test_deeply_nested_expression_is_a_vm_error() -> None:
    e: Any = const(0)
    for _ in range(5000):
        e = Binary("+", e, const(1))
    b = Builder("deep")
    b.loc = SourceLoc("deep.py", 3)
    b.print(e)
    with pytest.raises(VMError) as info:
        verify(b.build())
    assert info.value.loc == SourceLoc("deep.py", 3)


def test_exponentially_shared_expression_is_rejected_quickly() -> None:
    e: Any = Var("n", INT32)
    for _ in range(200):  # 2**200 nodes written out, 200 objects
        e = Binary("+", e, e)
    t = Base()
    t.emit(ins.Print(value=e))
    with time_limit():
        t.expect("print: value is too large (more than 100000 nodes written out)")
    t = Base()
    t.stmt(If(cond=Binary("==", e, const(0)), then_body=Seq()))
    with time_limit():
        t.expect("if: the condition is too large")


def test_huge_constant_offsets_are_not_folded_forever() -> None:
    e: Any = const(3)
    for _ in range(13):  # 3 ** (2 ** 13): beyond 64 bits, so not treated as a constant
        e = Binary("*", e, e)
    t = Base()
    s = t.b.alloc_shared("f16", (16, 32))
    t.b.store_shared(s, t.load(), (e, 0))
    with time_limit():
        verify(t.b.build())


# ---- unit tests: one per rule, with the exact message ---------------------------------------

LOC = SourceLoc("unit.py", 7)


class Base:
    """A small valid program to break: pointers x (const f16), y (f16), z (uint8);
    scalar n; grid (cdiv(n, 16),); 4 warps; views gx, gy [n, 64]."""

    def __init__(self, num_warps: int = 4) -> None:
        b = self.b = Builder("unit", num_warps)
        b.loc = SourceLoc("unit.py", 1)
        self.px = b.pointer_param("x", "f16", readonly=True)
        self.py = b.pointer_param("y", "f16")
        self.pz = b.pointer_param("z", "uint8")
        self.n = b.scalar_param("n")
        b.set_grid(Binary("cdiv", self.n, const(16)))
        self.gx = b.global_view(self.px, (self.n, 64))
        self.gy = b.global_view(self.py, (self.n, 64))
        self.layout = spatial(16, 8) * local(1, 4)  # [16, 32] over 128 threads

    def load(self, shape: tuple[int, ...] = (16, 32), layout: Any = None) -> Tensor:
        return self.b.load_global(self.gx, (0,) * len(shape), shape, layout)

    def emit(self, inst: ins.Instruction) -> None:
        self.b.emit(replace(inst, loc=LOC))

    def stmt(self, stmt: Any) -> None:
        self.b.append(replace(stmt, loc=LOC))

    def expect(self, fragment: str, loc: SourceLoc | None = LOC) -> VMError:
        with pytest.raises(VMError) as info:
            verify(self.b.build())
        err = info.value
        assert fragment in err.message, err.message
        assert err.loc == loc
        return err


def reg(name: str, dtype: str, shape: tuple[int, ...], layout: Any = None) -> Tensor:
    return Tensor(name, TensorType(R, parse(dtype), shape, layout))


def test_base_program_is_valid() -> None:
    t = Base()
    t.b.store_global(t.gy, t.load(), (0, 0))
    verify(t.b.build())


def test_error_text_has_instruction_and_location() -> None:
    t = Base()
    x = t.load()
    c = t.b.full(0.0, "f32", (16, 16))
    t.emit(ins.Dot(out=reg("o", "f32", (16, 16)), a=x, b=x, c=c))
    err = t.expect("dot: a is [16, 32] but b is [16, 32]; a's columns (k) must equal b's rows")
    assert err.instruction is not None and err.instruction.startswith("%o = dot a=%r")
    assert "at: unit.py:7" in str(err)


# scoping

def test_undefined_tensor() -> None:
    t = Base()
    t.emit(ins.Cast(out=reg("c", "f32", (4,)), src=reg("ghost", "f16", (4,))))
    t.expect("cast: src %ghost is not defined before it is used")


def test_tensor_defined_twice() -> None:
    t = Base()
    x = t.load()
    t.emit(ins.Full(out=x, value=const(0)))
    t.expect(f"tensor %{x.name} is defined twice")


def test_use_with_a_different_type_than_defined() -> None:
    t = Base()
    x = t.load()
    t.emit(ins.Cast(out=reg("c", "f32", (16, 32)), src=with_type(x, dtype=parse("bf16"))))
    t.expect(f"cast: src %{x.name} is used as register<bf16>[16, 32] but was defined as "
             "register<f16>[16, 32]")


def test_tensor_escaping_its_loop() -> None:
    t = Base()
    t.b.loc = SourceLoc("unit.py", 3)
    with t.b.for_range(0, 4):
        x = t.load()
    t.emit(ins.Print(value=x))
    t.expect(f"print: value %{x.name} is defined in the for body at unit.py:3 and not visible "
             "here; a tensor defined in a loop or branch body lives in that body only")


def test_tensor_escaping_an_else_branch() -> None:
    t = Base()
    with t.b.if_then(const(True)):
        pass
    with t.b.otherwise():
        x = t.load()
    t.emit(ins.Print(value=x))
    t.expect(f"%{x.name} is defined in the else body")


def test_loop_variable_outside_its_loop() -> None:
    t = Base()
    with t.b.for_range(0, 4) as i:
        pass
    t.emit(ins.Print(value=i))
    t.expect("print: value uses variable i, which is defined in the for body at unit.py:1 and "
             "not visible here")


def test_undefined_variable() -> None:
    t = Base()
    t.emit(ins.LoadGlobal(out=reg("r", "f16", (4, 4)), src=t.gx,
                          offsets=(Var("nowhere", INT32), const(0))))
    t.expect("load_global: offset 0 uses variable nowhere, which is not defined before it")


def test_variable_used_with_another_dtype() -> None:
    t = Base()
    t.emit(ins.Print(value=Var("n", parse("int64"))))
    t.expect("print: value uses n as int64 but it is declared as int32")


def test_use_after_free() -> None:
    t = Base()
    s = t.b.alloc_shared("f16", (16, 32))
    t.b.free_shared(s)
    t.emit(ins.LoadShared(out=reg("r", "f16", (16, 32)), src=s, offsets=(const(0), const(0))))
    t.expect(f"load_shared: src %{s.name} is used after free_shared (freed at unit.py:1)")


def test_double_free() -> None:
    t = Base()
    s = t.b.alloc_shared("f16", (16, 32))
    t.b.free_shared(s)
    t.emit(ins.FreeShared(tensor=s))
    t.expect(f"free_shared: %{s.name} is freed twice (freed at unit.py:1)")


def test_use_after_free_in_one_branch() -> None:
    t = Base()
    s = t.b.alloc_shared("f16", (16, 32))
    with t.b.if_then(Binary(">", t.n, const(0))):
        t.b.free_shared(s)
    t.emit(ins.Print(value=s))
    t.expect(f"print: value %{s.name} is used after free_shared")


def test_free_in_both_branches_is_fine() -> None:
    t = Base()
    s = t.b.alloc_shared("f16", (16, 32))
    with t.b.if_then(Binary(">", t.n, const(0))):
        t.b.free_shared(s)
    with t.b.otherwise():
        t.b.free_shared(s)
    verify(t.b.build())


def test_free_inside_a_loop_of_an_outer_allocation() -> None:
    t = Base()
    s = t.b.alloc_shared("f16", (16, 32))
    with t.b.for_range(0, 4):
        t.emit(ins.FreeShared(tensor=s))
    t.expect(f"free_shared: %{s.name} is allocated outside the loop it is freed in")


def test_redeclared_variable() -> None:
    t = Base()
    t.stmt(Let(var=Var("n", INT32), value=const(1)))
    t.expect("let: n is already defined; a variable name may not be redeclared")


# memory spaces

@pytest.mark.parametrize("case, fragment", [
    ("load_global_from_shared", "load_global: src must be a global tensor, got shared tensor"),
    ("store_global_register_dst", "store_global: dst must be a global tensor, got register"),
    ("store_global_global_src", "store_global: src must be a register tensor, got global"),
    ("copy_async_to_register", "copy_async: dst must be a shared tensor, got register"),
    ("load_shared_from_global", "load_shared: src must be a shared tensor, got global"),
    ("dot_on_shared", "dot: a must be a register tensor, got shared tensor"),
    ("elementwise_on_global", "elementwise add: operand 0 must be a register tensor, got global"),
    ("free_register", "free_shared: tensor must be a shared tensor, got register tensor"),
    ("load_shared_out_global", "load_shared: out must be a register tensor, got global"),
])
def test_memory_spaces(case: str, fragment: str) -> None:
    t = Base()
    s = t.b.alloc_shared("f16", (16, 32))
    r = t.load()
    zero2 = (const(0), const(0))
    inst = {
        "load_global_from_shared": ins.LoadGlobal(out=reg("o", "f16", (16, 32)), src=s,
                                                  offsets=zero2),
        "store_global_register_dst": ins.StoreGlobal(dst=r, src=r, offsets=zero2),
        "store_global_global_src": ins.StoreGlobal(dst=t.gy, src=t.gx, offsets=zero2),
        "copy_async_to_register": ins.CopyAsync(dst=r, src=t.gx, offsets=zero2),
        "load_shared_from_global": ins.LoadShared(out=reg("o", "f16", (16, 32)), src=t.gx,
                                                  offsets=zero2),
        "dot_on_shared": ins.Dot(out=reg("o", "f32", (16, 16)), a=s, b=r, c=r),
        "elementwise_on_global": ins.Elementwise(op="add", out=reg("o", "f16", (16, 32)),
                                                 args=(t.gx, r)),
        "free_register": ins.FreeShared(tensor=r),
        "load_shared_out_global": ins.LoadShared(
            out=Tensor("o", TensorType(G, parse("f16"), (16, 32))), src=s, offsets=zero2),
    }[case]
    t.emit(inst)
    t.expect(fragment)


# offsets, shapes, tiles

def test_offset_count() -> None:
    t = Base()
    t.emit(ins.LoadGlobal(out=reg("r", "f16", (16, 32)), src=t.gx, offsets=(const(0),)))
    t.expect("load_global: 1 offsets for %g, which has 2 dimensions; give one offset per "
             "dimension")


def test_float_offset() -> None:
    t = Base()
    t.emit(ins.LoadGlobal(out=reg("r", "f16", (16, 32)), src=t.gx,
                          offsets=(const(0.5), const(0))))
    t.expect("load_global: offset 0 must be an integer, got 0.5 of type f32")


def test_tile_rank_differs_from_global_rank() -> None:
    t = Base()
    t.emit(ins.LoadGlobal(out=reg("r", "f16", (512,)), src=t.gx, offsets=(const(0), const(0))))
    t.expect("load_global: %r is [512] but %g is [n, 64]; a load needs a tile with the same "
             "number of dimensions")


@pytest.mark.parametrize("shape", [(0, 4), (-1, 4), (2.0, 4), (True, 4)])
def test_register_shape_must_be_positive_ints(shape: tuple[Any, ...]) -> None:
    t = Base()
    t.emit(ins.Full(out=reg("r", "f16", shape), value=const(0)))
    t.expect("register tensor %r needs a static shape of positive ints")


def test_shared_tile_does_not_fit() -> None:
    t = Base()
    s = t.b.alloc_shared("f16", (32, 32))
    t.emit(ins.LoadShared(out=reg("r", "f16", (16, 32)), src=s, offsets=(const(24), const(0))))
    t.expect("load_shared: the tile [24, 40) in dim 0 does not fit in shared tensor %s of "
             "shape [32, 32]")


def test_shared_tile_larger_than_tensor() -> None:
    t = Base()
    s = t.b.alloc_shared("f16", (16, 16))
    t.emit(ins.StoreShared(dst=s, src=t.load(), offsets=(const(0), t.n)))
    t.expect("store_shared: the tile 32 elements in dim 1 does not fit in shared tensor %s")


def test_negative_constant_offset_into_shared() -> None:
    t = Base()
    s = t.b.alloc_shared("f16", (32, 32))
    t.emit(ins.LoadShared(out=reg("r", "f16", (16, 32)), src=s,
                          offsets=(Binary("-", const(2), const(4)), const(0))))
    t.expect("load_shared: the tile [-2, 14) in dim 0 does not fit")


# dtypes

def test_load_global_dtype() -> None:
    t = Base()
    t.emit(ins.LoadGlobal(out=reg("r", "f32", (16, 32)), src=t.gx,
                          offsets=(const(0), const(0))))
    t.expect("load_global: %r is f32 but %g is f16; a load keeps the dtype (use cast to "
             "convert)")


def test_store_global_dtype() -> None:
    t = Base()
    x = t.b.cast(t.load(), "f32")
    t.emit(ins.StoreGlobal(dst=t.gy, src=x, offsets=(const(0), const(0))))
    t.expect("store_global: %c is f32 but %g.1 is f16; a store keeps the dtype")


def test_store_to_readonly_parameter() -> None:
    t = Base()
    t.emit(ins.StoreGlobal(dst=t.gx, src=t.load(), offsets=(const(0), const(0))))
    t.expect("store_global: store to read-only parameter x (declared const ptr<f16>) through %g")


def test_cast_any_to_any() -> None:
    t = Base()
    x = t.load()
    for dtype in ("f4e2m1", "int3", "uint1", "f32", "int32", "f8e5m2"):
        x = t.b.cast(x, dtype)
    verify(t.b.build())


def test_cast_shape() -> None:
    t = Base()
    t.emit(ins.Cast(out=reg("c", "f32", (32, 16)), src=t.load()))
    t.expect("cast: out is [32, 16] but %r is [16, 32]; cast keeps the shape")


# views

def test_view_legal() -> None:
    t = Base()
    x = t.load(layout=t.layout)
    t.b.view(x, "uint8", (16, 64), spatial(16, 8) * local(1, 8))
    t.b.view(x, "bf16", (16, 32), t.layout)
    verify(t.b.build())


def test_view_bits_per_thread() -> None:
    t = Base()
    x = t.load(layout=t.layout)
    t.emit(ins.View(out=reg("v", "int4", (16, 64), spatial(16, 8) * local(1, 8)), src=x))
    t.expect("view: each thread holds 4 x 16 = 64 bits of %r but %v needs 8 x 4 = 32; a view "
             "must preserve bits per thread")


def test_view_needs_layouts() -> None:
    t = Base()
    x = t.load()
    t.emit(ins.View(out=reg("v", "bf16", (16, 32), t.layout), src=x))
    t.expect("view: %r has no layout; a view reinterprets each thread's bits, so both layouts "
             "must be given")


def test_view_thread_count_differs() -> None:
    t = Base(num_warps=4)
    x = t.load(layout=t.layout)
    # a 64-thread target: rejected already as a layout of this 128-thread block
    t.emit(ins.View(out=reg("v", "f16", (8, 64), spatial(8, 8) * local(1, 8)), src=x))
    t.expect("layout spatial(8, 8).local(1, 8) of %v spreads over 64 threads but the block has "
             "128 (4 warps)")


# register and shared layouts

def test_register_layout_shape() -> None:
    t = Base()
    t.emit(ins.Full(out=reg("r", "f16", (16, 16), t.layout), value=const(0)))
    t.expect("full: layout spatial(16, 8).local(1, 4) has shape [16, 32] but %r is [16, 16]; a "
             "register layout must have its tensor's shape")


def test_register_layout_not_a_layout() -> None:
    t = Base()
    t.emit(ins.Full(out=reg("r", "f16", (16, 16), "row-major"), value=const(0)))
    t.expect("full: register tensor %r's layout must be a RegisterLayout, got 'row-major'")


def test_shared_layout_element_bits() -> None:
    t = Base()
    t.emit(ins.AllocShared(out=Tensor("s", TensorType(S, parse("f16"), (16, 32),
                                                       row_major((16, 32), "int8")))))
    t.expect("alloc_shared: shared layout SharedLayout((16, 32), (32, 1), 8) holds 8-bit "
             "elements but %s is f16 (16 bits)")


def test_shared_layout_shape() -> None:
    t = Base()
    t.emit(ins.AllocShared(out=Tensor("s", TensorType(S, parse("f16"), (16, 32),
                                                       row_major((32, 16), "f16")))))
    t.expect("a shared layout must have its tensor's shape")


def test_annotate_layout_contradicts_existing() -> None:
    t = Base()
    x = t.load(layout=t.layout)
    t.emit(ins.AnnotateLayout(tensor=x, layout=local(1, 4) * spatial(16, 8)))
    t.expect("annotate_layout: %r already has layout spatial(16, 8).local(1, 4), which the "
             "annotation")


def test_annotate_layout_twice_differently() -> None:
    t = Base()
    x = t.load()
    t.b.annotate_layout(x, t.layout)
    t.emit(ins.AnnotateLayout(tensor=x, layout=local(1, 4) * spatial(16, 8)))
    t.expect("annotate_layout: %r was annotated with spatial(16, 8).local(1, 4) before")


def test_annotate_layout_wrong_shape() -> None:
    t = Base()
    x = t.load(shape=(16, 16))
    t.emit(ins.AnnotateLayout(tensor=x, layout=t.layout))
    t.expect("annotate_layout: layout spatial(16, 8).local(1, 4) has shape [16, 32] but %r is "
             "[16, 16]")


# elementwise, where, reduce

def test_unknown_elementwise_op() -> None:
    t = Base()
    x = t.load()
    t.emit(ins.Elementwise(op="pow", out=reg("e", "f16", (16, 32)), args=(x, x)))
    t.expect("elementwise: unknown op 'pow'; the ops are neg, abs")


def test_elementwise_arity() -> None:
    t = Base()
    x = t.load()
    t.emit(ins.Elementwise(op="exp", out=reg("e", "f16", (16, 32)), args=(x, x)))
    t.expect("elementwise exp takes 1 operand(s), got 2")


def test_elementwise_operand_dtypes() -> None:
    t = Base()
    x = t.load()
    y = t.b.cast(x, "f32")
    t.emit(ins.Elementwise(op="add", out=reg("e", "f16", (16, 32)), args=(x, y)))
    t.expect("elementwise add: operands %r (f16) and %c (f32) differ in dtype; cast one first")


def test_elementwise_broadcast() -> None:
    t = Base()
    x = t.load()
    y = t.load(shape=(16, 1))
    z = t.load(shape=(1, 16))
    t.b.elementwise("add", x, y)
    t.emit(ins.Elementwise(op="add", out=reg("e", "f16", (16, 32)), args=(x, z)))
    t.expect("elementwise add: operand shapes [16, 32], [1, 16] do not broadcast")


def test_elementwise_out_shape() -> None:
    t = Base()
    x = t.load()
    y = t.load(shape=(16, 1))
    t.emit(ins.Elementwise(op="mul", out=reg("e", "f16", (16, 1)), args=(x, y)))
    t.expect("elementwise mul: out is [16, 1] but the operands broadcast to [16, 32]")


def test_comparison_gives_bool() -> None:
    t = Base()
    x = t.load()
    t.emit(ins.Elementwise(op="lt", out=reg("e", "f16", (16, 32)), args=(x, const(0.0))))
    t.expect("elementwise lt: a comparison gives bool (uint1), but out is f16")


def test_arithmetic_keeps_dtype() -> None:
    t = Base()
    x = t.load()
    t.emit(ins.Elementwise(op="add", out=reg("e", "f32", (16, 32)), args=(x, const(1.0))))
    t.expect("elementwise add: out is f32 but the operands are f16; the result has the "
             "operands' dtype")


def test_bitwise_on_floats() -> None:
    t = Base()
    x = t.load()
    t.emit(ins.Elementwise(op="xor", out=reg("e", "f16", (16, 32)), args=(x, x)))
    t.expect("elementwise xor: bitwise op on f16; xor takes integer operands only")


def test_float_only_op_on_integers() -> None:
    t = Base()
    x = t.b.cast(t.load(), "int8")
    t.emit(ins.Elementwise(op="sqrt", out=reg("e", "int8", (16, 32)), args=(x,)))
    t.expect("elementwise sqrt: sqrt takes float operands only, got int8")


def test_float_scalar_with_integer_tensor() -> None:
    t = Base()
    x = t.b.cast(t.load(), "int32")
    t.emit(ins.Elementwise(op="mul", out=reg("e", "int32", (16, 32)), args=(x, const(0.5))))
    t.expect("elementwise mul: scalar operand 1 is f32 but the tensor operands are int32")


def test_elementwise_needs_a_tensor() -> None:
    t = Base()
    t.emit(ins.Elementwise(op="add", out=reg("e", "int32", (4,)), args=(const(1), const(2))))
    t.expect("elementwise add: needs at least one tensor operand")


def test_where_cond_must_be_bool() -> None:
    t = Base()
    x = t.load()
    t.emit(ins.Where(out=reg("w", "f16", (16, 32)), cond=x, x=x, y=const(0.0)))
    t.expect("where: cond %r is f16; it must be bool (uint1)")


def test_where_dtype() -> None:
    t = Base()
    x = t.load()
    c = t.b.elementwise("gt", x, const(0.0))
    t.emit(ins.Where(out=reg("w", "f32", (16, 32)), cond=c, x=x, y=const(0.0)))
    t.expect("where: x %r is f16 but out is f32; x, y and out share one dtype")


def test_unknown_reduce_op() -> None:
    t = Base()
    t.emit(ins.Reduce(op="prod", out=reg("o", "f16", (16,)), src=t.load(), dim=1))
    t.expect("reduce: unknown op 'prod'; the ops are sum, max, min")


@pytest.mark.parametrize("dim", [2, -1, 7])
def test_reduce_dim_out_of_range(dim: int) -> None:
    t = Base()
    t.emit(ins.Reduce(op="sum", out=reg("o", "f16", (16,)), src=t.load(), dim=dim))
    t.expect(f"reduce sum: dim {dim} is out of range for %r of shape [16, 32] (dims 0..1)")


def test_reduce_out_shape() -> None:
    t = Base()
    t.emit(ins.Reduce(op="max", out=reg("o", "f16", (16,)), src=t.load(), dim=1,
                      keepdim=True))
    t.expect("reduce max: out is [16] but reducing dim 1 of [16, 32] gives [16, 1] (keepdim)")


# dot

def dot_program(a: str, b: str, c: str, shapes: tuple[Any, ...] = ((16, 32), (32, 8), (16, 8)),
                out: str | None = None) -> Base:
    t = Base()
    ta = t.b.full(const(0), a, shapes[0])
    tb = t.b.full(const(0), b, shapes[1])
    tc = t.b.full(const(0), c, shapes[2])
    t.emit(ins.Dot(out=reg("o", out or c, shapes[2]), a=ta, b=tb, c=tc))
    return t


@pytest.mark.parametrize("ab", sorted(str(t) for t in DOT_ACCUMULATORS))
def test_dot_supported_dtypes(ab: str) -> None:
    for c in DOT_ACCUMULATORS[parse(ab)]:
        verify(dot_program(ab, ab, str(c)).b.build())


def test_dot_k_mismatch() -> None:
    dot_program("f16", "f16", "f32", ((16, 32), (16, 8), (16, 8))).expect(
        "dot: a is [16, 32] but b is [16, 8]; a's columns (k) must equal b's rows")


def test_dot_c_shape() -> None:
    dot_program("f16", "f16", "f32", ((16, 32), (32, 8), (8, 16))).expect(
        "dot: a @ b is [16, 8] but c is [8, 16]; c must be [a's rows, b's columns]")


def test_dot_not_2d() -> None:
    dot_program("f16", "f16", "f32", ((2, 16, 32), (32, 8), (16, 8))).expect(
        "dot: a %r is [2, 16, 32]; dot takes 2-D tiles")


def test_dot_mixed_inputs() -> None:
    dot_program("f16", "bf16", "f32").expect(
        "dot: a is f16 but b is bf16; a and b must have one dtype")


def test_dot_unsupported_inputs() -> None:
    dot_program("f4e2m1", "f4e2m1", "f32").expect(
        "dot: inputs of dtype f4e2m1 are not supported")


def test_dot_accumulator() -> None:
    dot_program("int8", "int8", "f32").expect(
        "dot: c is f32 but int8 inputs accumulate in int32")


def test_dot_out_type() -> None:
    dot_program("f16", "f16", "f32", out="f16").expect(
        "dot: out is register<f16>[16, 8] but c is register<f32>[16, 8]; out must have c's type")


# assign, full, print, copy_async_wait, global_view

def test_assign_type() -> None:
    t = Base()
    x = t.load()
    y = t.b.cast(x, "f32")
    t.emit(ins.Assign(dst=x, src=y))
    t.expect("assign: %r is register<f16>[16, 32] but %c is register<f32>[16, 32]; assign "
             "needs the same type")


def test_full_value_must_be_scalar() -> None:
    t = Base()
    x = t.load()
    t.emit(ins.Full(out=reg("f", "f16", (16, 32)), value=x))
    t.expect("full: value must be a scalar expression, got tensor %r")


def test_copy_async_wait_negative() -> None:
    t = Base()
    t.emit(ins.CopyAsyncWait(n=-1))
    t.expect("copy_async_wait: n (groups left in flight) must be an int >= 0, got -1")


def test_global_view_pointer_not_a_parameter() -> None:
    t = Base()
    ghost = Pointer("w", PointerType(parse("f16")))
    t.emit(ins.GlobalView(out=Tensor("gw", TensorType(G, parse("f16"), (t.n,))), ptr=ghost,
                          offset=const(0), strides=(const(1),)))
    t.expect("global_view: w is not a pointer parameter of the kernel")


def test_global_view_dtype_width() -> None:
    t = Base()
    t.emit(ins.GlobalView(out=Tensor("gw", TensorType(G, parse("int4"), (t.n,))), ptr=t.pz,
                          offset=const(0), strides=(const(1),)))
    t.expect("global_view: %gw is int4 (4 bits) over ptr<uint8> (8 bits); a view's dtype must "
             "be the pointer's or one of the same width")


def test_global_view_same_width_is_fine() -> None:
    t = Base()
    t.b.global_view(t.pz, (t.n,), dtype="int8")
    t.b.global_view(t.px, (t.n,), dtype="bf16")
    verify(t.b.build())


def test_global_view_strides_count() -> None:
    t = Base()
    t.emit(ins.GlobalView(out=Tensor("gw", TensorType(G, parse("f16"), (t.n, 4))), ptr=t.py,
                          offset=const(0), strides=(const(1),)))
    t.expect("global_view: 1 strides for a view of shape [n, 4]; give one stride per dimension")


# statements and the program header

def test_if_condition_must_be_bool() -> None:
    t = Base()
    t.stmt(If(cond=t.n, then_body=Seq()))
    t.expect("if: the condition n is int32; it must be bool (uint1)")


def test_for_bounds_must_be_integers() -> None:
    t = Base()
    i = Var("i", INT32)
    t.stmt(For(var=i, start=const(0), stop=const(1.5), step=const(1), body=Seq()))
    t.expect("for: loop stop must be an integer, got 1.5 of type f32")


def test_for_step_zero() -> None:
    t = Base()
    t.stmt(For(var=Var("i", INT32), start=const(0), stop=t.n, step=const(0), body=Seq()))
    t.expect("for: the step is 0")


def test_assign_var_to_parameter() -> None:
    t = Base()
    t.stmt(AssignVar(var=t.n, value=const(3)))
    t.expect("assign_var: n is a kernel parameter; only a variable declared by let may be "
             "updated")


def test_assign_var_to_loop_variable() -> None:
    t = Base()
    with t.b.for_range(0, 4) as i:
        t.stmt(AssignVar(var=i, value=const(3)))
    t.expect("assign_var: i is a loop variable")


def test_assign_var_undeclared() -> None:
    t = Base()
    t.stmt(AssignVar(var=Var("k", INT32), value=const(3)))
    t.expect("assign_var: the target uses variable k, which is not defined before it")


def test_implicit_conversions() -> None:
    t = Base()
    v = t.b.let(const(1.0), "v")  # f32
    t.b.assign_var(v, t.n)  # int -> float: fine
    w = t.b.let(const(0, "int64"), "w")
    t.b.assign_var(w, t.n)  # int -> int: fine
    verify(t.b.build())
    t.stmt(AssignVar(var=w, value=v))
    t.expect("assign_var: w is int64 but the value is f32, which does not convert implicitly")


def test_let_float_to_bool() -> None:
    t = Base()
    t.stmt(Let(var=Var("flag", BOOL), value=const(1)))
    t.expect("let: flag is uint1 but the value is int32, which does not convert implicitly")


def test_scalar_integer_division() -> None:
    t = Base()
    t.emit(ins.Print(value=Binary("/", t.n, const(2))))
    t.expect("print: `/` on integers in value; write `//` for integer division")


def test_block_index_beyond_grid() -> None:
    t = Base()
    t.emit(ins.Print(value=BlockIndex(1)))
    t.expect("print: value uses block_idx.y but the grid has 1 dimension(s)")


@pytest.mark.parametrize("num_warps", [0, 33, 2.0, True])
def test_num_warps(num_warps: Any) -> None:
    t = Base()
    t.b.num_warps = num_warps
    t.expect("num_warps must be an int in 1..32", loc=None)


@pytest.mark.parametrize("grid, fragment", [
    ((), "the grid has 0 dimensions; it must have 1 to 3"),
    ((const(1),) * 4, "the grid has 4 dimensions"),
    ((BlockIndex(0),), "grid dimension 0 uses block_idx; the grid may depend on scalar"),
    ((const(0),), "grid dimension 0 is 0; it must be >= 1"),
    ((const(2.0),), "grid dimension 0 must be an integer"),
    ((Var("q", INT32),), "grid dimension 0 uses variable q, which is not defined"),
])
def test_grid(grid: tuple[Any, ...], fragment: str) -> None:
    t = Base()
    t.b.grid = grid
    t.expect(fragment, loc=SourceLoc("unit.py", 1))  # where set_grid was called


def test_duplicate_parameters() -> None:
    t = Base()
    t.b.params.append(Var("n", INT32))
    t.expect("parameter n is declared twice", loc=None)


def test_not_a_program() -> None:
    with pytest.raises(VMError, match="not a Program"):
        verify("kernel")  # type: ignore[arg-type]


def test_unknown_statement() -> None:
    t = Base()
    t.b.append(42)  # type: ignore[arg-type]
    t.expect("not a statement: 42", loc=None)


# ---- limits (docs/ir.md, "Limits") ----------------------------------------------------------

@pytest.mark.parametrize("dtype, shape, layout, registers", [
    ("f32", (128 * 255,), None, None),  # 255 f32 a thread over 128 threads: the most
    ("f32", (128 * 255 + 1,), None, 256),
    ("f16", (128 * 510,), None, None),  # two f16 a register
    ("f16", (128 * 510 + 1,), None, 256),
    ("int4", (2**40,), None, 2**40 // 128 // 8),
    # a layout's elements per thread count, replicas included: 256 f32 on each thread
    ("f32", (256,), local(256).replicated(128), 256),
])
def test_register_tile_fits_a_threads_registers(dtype: str, shape: tuple[int, ...],
                                                layout: Any, registers: int | None) -> None:
    t = Base()
    t.b.loc = LOC
    t.b.full(0, dtype, shape, layout)
    if registers is None:
        verify(t.b.build())
    else:
        t.expect(f"needs {registers} 32-bit registers per thread; a thread has 255")


@pytest.mark.parametrize("dtype, shape, size", [
    ("f32", (227 * 256,), None),  # 227 KiB exactly
    ("uint8", (227 * 1024 + 1,), 227 * 1024 + 1),
    ("int4", (2**62,), 2**61),
])
def test_shared_allocation_fits_a_block(dtype: str, shape: tuple[int, ...],
                                        size: int | None) -> None:
    t = Base()
    t.b.loc = LOC
    t.b.alloc_shared(dtype, shape)
    if size is None:
        verify(t.b.build())
    else:
        t.expect(f"takes {size} bytes; a block has at most 232448 bytes (227 KiB")


def i64(value: int) -> Const:
    return const(value, "int64")


@pytest.mark.parametrize("shape, strides, offset, fragment", [
    ((2**58,), (1,), 0, None),  # 2^58 f16 = 2^62 bits: fits
    ((2**59,), (1,), 0, "holds more than 2^63 bits of f16"),
    ((2, 2**40, 2**40), (1, 1, 1), 0, "holds more than 2^63 bits of f16"),
    ((4, 4), (2**57, 1), 0, None),  # last element 3 * 2^57 + 3: bit about 1.5 * 2^62
    ((4, 4), (2**58, 1), 0, "reaches element 864691128455135235 of y"),
    ((4,), (1,), 2**59, "reaches element 576460752303423491 of y"),
    ((4,), (1,), -(2**59), "reaches element 576460752303423491 of y"),
])
def test_global_view_addresses_fit_int64(shape: tuple[int, ...], strides: tuple[int, ...],
                                         offset: int, fragment: str | None) -> None:
    t = Base()
    t.b.loc = LOC
    t.b.global_view(t.py, [i64(n) for n in shape], [i64(s) for s in strides], i64(offset))
    if fragment is None:
        verify(t.b.build())
    else:
        t.expect(fragment)


# arange

@pytest.mark.parametrize("dtype, shape, dim", [
    ("int32", (16, 32), 0), ("int32", (16, 32), 1), ("uint8", (256,), 0), ("uint1", (2, 64), 0),
    ("int8", (4, 128, 2), 1)])
def test_arange_valid(dtype: str, shape: tuple[int, ...], dim: int) -> None:
    t = Base()
    t.emit(ins.Arange(out=reg("i", dtype, shape), dim=dim))
    verify(t.b.build())


@pytest.mark.parametrize("dim", [2, -1, True, "0"])
def test_arange_dim(dim: Any) -> None:
    t = Base()
    t.emit(ins.Arange(out=reg("i", "int32", (16, 32)), dim=dim))
    t.expect("arange: dim" + (" must be an int" if not isinstance(dim, int) or dim is True
                              else f" {dim} is out of range for out of shape [16, 32]"))


def test_arange_float_dtype() -> None:
    t = Base()
    t.emit(ins.Arange(out=reg("i", "f32", (16, 32)), dim=1))
    t.expect("arange: out is f32; an index tile has an integer dtype")


def test_arange_dtype_must_hold_every_index() -> None:
    t = Base()
    t.emit(ins.Arange(out=reg("i", "int8", (4, 128)), dim=1))  # 127, the last, fits
    verify(t.b.build())
    t = Base()
    t.emit(ins.Arange(out=reg("i", "int8", (4, 129)), dim=1))
    t.expect("arange: out is int8, which does not hold the index 128 of dim 1")
