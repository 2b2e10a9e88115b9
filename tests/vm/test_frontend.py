"""The frontend: Python kernels -> VM IR (vm/frontend.py, vm/lang.py)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.expr import Binary, BlockIndex, Const, Select, Unary, Var
from tilevm.ir.stmt import AssignVar, For, If, Let, Program, Seq
from tilevm.ir.types import MemorySpace, Pointer
from tilevm.layouts import local, spatial
from tilevm.vm import lang as tv

HERE = __file__


# ---- helpers -----------------------------------------------------------------------------

def line_of(kernel, text: str, nth: int = 0) -> int:
    """The file line of the `nth` source line of `kernel` containing `text`."""
    fn = kernel.fn if isinstance(kernel, tv.Kernel) else kernel
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, line in enumerate(lines) if text in line]
    return hits[nth]


def outline(seq: Seq) -> list:
    """The statement structure: opnames, "let"/"assign_var", ("for", body), ("if", a, b)."""
    out: list = []
    for s in seq.body:
        if isinstance(s, For):
            out.append(("for", outline(s.body)))
        elif isinstance(s, If):
            out.append(("if", outline(s.then_body),
                        None if s.else_body is None else outline(s.else_body)))
        elif isinstance(s, Let):
            out.append("let")
        elif isinstance(s, AssignVar):
            out.append("assign_var")
        elif isinstance(s, ins.Elementwise):
            out.append(f"elementwise.{s.op}")
        else:
            out.append(s.opname)
    return out


def walk(seq: Seq):
    for s in seq.body:
        yield s
        if isinstance(s, For):
            yield from walk(s.body)
        elif isinstance(s, If):
            yield from walk(s.then_body)
            if s.else_body is not None:
                yield from walk(s.else_body)


def instructions(program: Program, cls=ins.Instruction) -> list:
    return [s for s in walk(program.body) if isinstance(s, cls)]


def load_module(path, source: str) -> dict:
    """Run `source` as the module file `path` (kernels need their source on disk)."""
    path.write_text(source)
    namespace: dict = {"__name__": path.stem, "__file__": str(path)}
    exec(compile(source, str(path), "exec"), namespace)
    return namespace


def verified(program: Program) -> Program:
    """`program`, checked by the IR verifier (a cross-check of what the frontend builds)."""
    from tilevm.ir.verifier import verify

    verify(program)
    return program


def error_of(fn, *args, **kwargs) -> VMError:
    with pytest.raises(VMError) as info:
        fn(*args, **kwargs)
    return info.value


# ---- kernels -----------------------------------------------------------------------------

@tv.kernel(num_warps=4)
def vector_add(x: tv.ptr("f32", const=True), y: tv.ptr("f32", const=True), out: tv.ptr("f32"),
               n: tv.int32, *, block: int = 1024):
    tv.grid(tv.cdiv(n, block))
    gx, gy, go = tv.global_view(x, [n]), tv.global_view(y, [n]), tv.global_view(out, [n])
    offset = tv.block_idx(0) * block
    a = tv.load_global(gx, [offset], [block])
    b = tv.load_global(gy, [offset], [block])
    tv.store_global(go, a + b, [offset])


@tv.kernel
def row_sum(x: tv.ptr("f16"), out: tv.ptr("f32"), n: tv.int32, *, block: int = 4,
            num_warps: int = 2):
    g = tv.global_view(x, [n, block])
    go = tv.global_view(out, [block])
    acc = tv.zeros([block])                     # carried tile
    count = 0                                   # carried scalar (a Python int before)
    for i in tv.range(0, n, 8):                 # runtime loop
        t = tv.load_global(g, [i, 0], [8, block]).to(tv.f32)
        acc = acc + t.sum(0)                    # accumulate
        count += 1                              # count
    tv.store_global(go, acc * count, [0])       # after the loop


@tv.kernel
def unrolled(x: tv.ptr("f32"), *, n: int = 4, stop_at: int = 99):
    g = tv.global_view(x, [64])
    total = tv.zeros([4])
    for k in range(n):                          # compile-time loop
        if k == 1:
            continue
        if k == stop_at:
            break
        total = total + tv.load_global(g, [k * 4], [4])
    tv.store_global(g, total, [0])


@tv.kernel
def branches(x: tv.ptr("f32"), n: tv.int32):
    g = tv.global_view(x, [n])
    v = tv.load_global(g, [0], [8])
    scale = 1.0
    if n > 16:                                  # runtime if
        v = v * 2.0                             # then
        scale = 0.5
    else:
        v = v - 1.0                             # else
    tv.store_global(g, v * scale, [0])          # merged


# ---- signature and specialization --------------------------------------------------------

def test_vector_add_ir():
    p = verified(vector_add.specialize(block=256))
    assert p.name == "vector_add" and p.num_warps == 4
    assert p.constants == (("block", "256"),)
    x, y, out, n = p.params
    assert isinstance(x, Pointer) and x.type.readonly and str(x.type.dtype) == "f32"
    assert not out.type.readonly
    assert n == Var("n", tv.int32)
    assert p.grid == (Binary("cdiv", n, Const(256, tv.int32)),)
    assert outline(p.body) == ["global_view"] * 3 + ["load_global", "load_global",
                                                     "elementwise.add", "store_global"]
    load = instructions(p, ins.LoadGlobal)[0]
    assert load.out.type.static_shape == (256,) and load.out.space is MemorySpace.REGISTER
    assert load.offsets == (Binary("*", BlockIndex(0), Const(256, tv.int32)),)


def test_every_instruction_carries_the_users_line():
    p = vector_add.specialize(block=128)
    lines = [(i.opname, i.loc.line) for i in instructions(p)]
    assert all(i.loc.file == HERE for i in instructions(p))
    assert lines == [
        ("global_view", line_of(vector_add, "gx, gy, go =")),
        ("global_view", line_of(vector_add, "gx, gy, go =")),
        ("global_view", line_of(vector_add, "gx, gy, go =")),
        ("load_global", line_of(vector_add, "a = tv.load_global")),
        ("load_global", line_of(vector_add, "b = tv.load_global")),
        ("elementwise", line_of(vector_add, "tv.store_global(go")),
        ("store_global", line_of(vector_add, "tv.store_global(go")),
    ]


def test_specializations_are_cached_per_constants():
    p256 = vector_add.specialize(block=256)
    assert vector_add.specialize(block=256) is p256
    assert vector_add.specialize() is vector_add.specialize(block=1024)
    assert vector_add.specialize(block=512) is not p256
    assert instructions(vector_add.specialize(block=512), ins.LoadGlobal)[0].out.shape == (512,)


def test_signature():
    sig = vector_add.signature
    assert [p.name for p in sig.params] == ["x", "y", "out", "n"]
    assert [p.is_pointer for p in sig.params] == [True, True, True, False]
    assert sig.constant_names == ("block",)
    assert str(sig) == ("(x: const ptr<f32>, y: const ptr<f32>, out: ptr<f32>, n: int32, *, "
                        "block=1024)")
    assert vector_add.name == "vector_add"
    assert vector_add.source_file == HERE


def test_num_warps_keyword_overrides_the_decorator():
    assert row_sum.specialize().num_warps == 2
    assert row_sum.specialize(num_warps=8).num_warps == 8
    assert dict(row_sum.specialize(num_warps=8).constants) == {"block": "4", "num_warps": "8"}


def test_closure_and_dtype_constants():
    tile = 32

    @tv.kernel(num_warps=1)
    def fill(out: tv.ptr("f16"), *, dtype=tv.f16, layout=None):
        g = tv.global_view(out, [tile])
        v = tv.full([tile], 1.5, dtype, layout=layout)
        tv.store_global(g, v.to(tv.f16), [0])

    p = verified(fill.specialize(dtype=tv.f32, layout=spatial(32)))
    full = instructions(p, ins.Full)[0]
    assert full.out.dtype == tv.f32 and full.out.shape == (32,)
    assert full.out.layout == spatial(32)
    assert fill.specialize(dtype=tv.f32, layout=spatial(32)) is p
    assert fill.specialize(dtype="f32", layout=spatial(32)) is not p  # "f32" != f32
    assert dict(p.constants)["dtype"] == "f32"


# ---- loops -------------------------------------------------------------------------------

def test_compile_time_loop_is_unrolled_with_break_and_continue():
    p = verified(unrolled.specialize(n=4))
    loads = instructions(p, ins.LoadGlobal)
    assert [ld.offsets[0] for ld in loads] == [Const(0, tv.int32), Const(8, tv.int32),
                                               Const(12, tv.int32)]  # k = 1 skipped
    assert not instructions(p, For)
    p = unrolled.specialize(n=4, stop_at=2)
    assert [ld.offsets[0] for ld in instructions(p, ins.LoadGlobal)] == [Const(0, tv.int32)]
    assert {ld.loc.line for ld in loads} == {line_of(unrolled, "total = total + ")}


def test_runtime_loop_carries_a_tile_and_a_scalar():
    p = verified(row_sum.specialize())
    assert outline(p.body) == [
        "global_view", "global_view", "full", "let",
        ("for", ["load_global", "cast", "reduce", "elementwise.add", "assign", "assign_var"]),
        "elementwise.mul", "store_global",
    ]
    acc = instructions(p, ins.Full)[0].out
    let = next(s for s in walk(p.body) if isinstance(s, Let))
    assert let.var.name == "count" and let.value == Const(0, tv.int32)
    assert let.loc.line == line_of(row_sum, "for i in tv.range")
    loop = next(s for s in walk(p.body) if isinstance(s, For))
    assert loop.var.name == "i" and loop.stop == Var("n", tv.int32)
    assert loop.step == Const(8, tv.int32) and loop.unroll is None
    assert loop.loc.line == line_of(row_sum, "for i in tv.range")
    assign = next(s for s in walk(p.body) if isinstance(s, ins.Assign))
    add = next(s for s in walk(p.body) if isinstance(s, ins.Elementwise) and s.op == "add")
    assert assign.dst == acc and assign.src == add.out and add.args[0] == acc
    assert assign.loc.line == line_of(row_sum, "# accumulate")
    update = next(s for s in walk(p.body) if isinstance(s, AssignVar))
    assert update.var == let.var and update.value == Binary("+", let.var, Const(1, tv.int32))
    assert update.loc.line == line_of(row_sum, "# count")
    mul = instructions(p, ins.Elementwise)[-1]
    assert mul.args == (acc, let.var)  # after the loop, the names read the carried values


def test_range_with_a_runtime_bound_and_tv_range_with_ints_are_ir_loops():
    @tv.kernel
    def k(x: tv.ptr("f32"), n: tv.int32):
        g = tv.global_view(x, [n])
        for i in range(n):
            tv.store_global(g, tv.full([1], 0.0), [i])
        for j in tv.range(2, 10, 2, unroll=4):
            tv.store_global(g, tv.full([1], 1.0), [j])

    loops = instructions(verified(k.specialize()), For)
    assert [(f.start, f.stop, f.step, f.unroll) for f in loops] == [
        (Const(0, tv.int32), Var("n", tv.int32), Const(1, tv.int32), None),
        (Const(2, tv.int32), Const(10, tv.int32), Const(2, tv.int32), 4)]


def test_loop_carried_swap_and_aliases_keep_python_semantics():
    @tv.kernel
    def fib(x: tv.ptr("int32"), n: tv.int32):
        g = tv.global_view(x, [4])
        a = 0
        b = 1
        acc = tv.zeros([4], tv.int32)
        for _ in tv.range(n):
            a, b = b, a + b
            before = acc
            acc = acc + a
            tv.store_global(g, before, [0])
        tv.store_global(g, acc + b, [0])

    p = verified(fib.specialize())
    loop = instructions(p, For)[0]
    lets = [s for s in walk(p.body) if isinstance(s, Let)]
    a, b = lets[0].var, lets[1].var
    body = list(loop.body.body)
    # b's new value (a + b) is computed before a is updated
    snap = body[0]
    assert isinstance(snap, Let) and snap.value == Binary("+", a, b)
    assert body[1] == AssignVar(var=a, value=b, loc=body[1].loc)
    assert body[2] == AssignVar(var=b, value=snap.var, loc=body[2].loc)
    # `before` keeps the old acc: a copy is made before acc is overwritten
    add, copy, assign, store = body[3:7]
    assert isinstance(copy, ins.Cast) and isinstance(assign, ins.Assign)
    assert store.src == copy.out and assign.dst == copy.src


def test_nested_runtime_loops_update_the_outer_variables():
    @tv.kernel
    def nested(x: tv.ptr("f32"), n: tv.int32):
        g = tv.global_view(x, [n])
        acc = tv.zeros([2])
        s = 0
        for i in tv.range(n):
            for j in tv.range(i):
                acc = acc + 1.0
                s = s + j
        tv.store_global(g, acc, [s])

    p = verified(nested.specialize())
    assert outline(p.body) == [
        "global_view", "full", "let",
        ("for", [("for", ["elementwise.add", "assign", "assign_var"])]),
        "store_global"]
    (let,) = [s for s in walk(p.body) if isinstance(s, Let)]
    (update,) = [s for s in walk(p.body) if isinstance(s, AssignVar)]
    assert update.var == let.var


def test_comprehensions_and_logical_operators():
    @tv.kernel
    def k(x: tv.ptr("f32"), n: tv.int32, m: tv.int32, *, parts: int = 3):
        g = tv.global_view(x, [n])
        tiles = [tv.load_global(g, [i * 4], [4]) for i in range(parts)]
        total = sum(tiles[1:], tiles[0])
        if n > 0 and not m == 3:
            tv.store_global(g, total, [0])
        off = 4 if parts > 2 else 0
        pick = n if m > 1 else 7
        tv.store_global(g, total, [off + pick])

    p = k.specialize()
    assert len(instructions(p, ins.LoadGlobal)) == 3
    n, m = Var("n", tv.int32), Var("m", tv.int32)
    (branch,) = instructions(p, If)
    assert branch.cond == Binary("and", Binary(">", n, Const(0, tv.int32)),
                                 Unary("not", Binary("==", m, Const(3, tv.int32))))
    store = instructions(p, ins.StoreGlobal)[-1]
    assert store.offsets[0] == Binary("+", Const(4, tv.int32),
                                      Select(Binary(">", m, Const(1, tv.int32)), n,
                                             Const(7, tv.int32)))


# ---- if ----------------------------------------------------------------------------------

def test_runtime_if_else_merges_into_the_outer_names():
    p = verified(branches.specialize())
    assert outline(p.body) == [
        "global_view", "load_global", "let",
        ("if", ["elementwise.mul", "assign", "assign_var"], ["elementwise.sub", "assign"]),
        "elementwise.mul", "store_global"]
    v = instructions(p, ins.LoadGlobal)[0].out
    (branch,) = instructions(p, If)
    assert branch.cond == Binary(">", Var("n", tv.int32), Const(16, tv.int32))
    assert branch.loc.line == line_of(branches, "# runtime if")
    then_assign, else_assign = instructions(p, ins.Assign)
    assert then_assign.dst == v == else_assign.dst
    assert then_assign.loc.line == line_of(branches, "# then")
    assert else_assign.loc.line == line_of(branches, "# else")
    scale = next(s for s in walk(p.body) if isinstance(s, Let)).var
    assert scale.dtype == tv.f32
    assert instructions(p, ins.Elementwise)[-1].args == (v, scale)


def test_compile_time_if_visits_one_branch():
    @tv.kernel
    def k(x: tv.ptr("f32"), *, relu: bool = False):
        g = tv.global_view(x, [4])
        v = tv.load_global(g, [0], [4])
        if relu:
            v = tv.maximum(v, 0.0)
        else:
            v = -v
        tv.store_global(g, v, [0])

    assert "elementwise.max" in outline(k.specialize(relu=True).body)
    assert "elementwise.neg" in outline(k.specialize().body)
    assert not instructions(k.specialize(), If)


def test_tile_ops_methods_and_functions():
    @tv.kernel(num_warps=1)
    def k(x: tv.ptr("f16"), y: tv.ptr("uint8"), n: tv.int32):
        g = tv.global_view(x, [16, 16])
        a = tv.load_global(g, [0, 0], [16, 16])
        b = tv.load_global(g, [0, 0], [16, 16], layout=local(2, 1).spatial(8, 4).local(1, 4))
        c = tv.dot(a, b)
        m = c.max(1)
        e = tv.exp(c - tv.max(c, 1, keepdim=True)).sum(dim=1)
        w = tv.where(c > 0.0, c, 0.0)
        gy = tv.global_view(y, [n])
        q = tv.load_global(gy, [0], [256], layout=local(8).spatial(32))
        packed = q.view(tv.uint4, [512], local(16).spatial(32))
        s = tv.alloc_shared(tv.f16, [16, 16])
        tv.store_shared(s, a, [0, 0])
        tv.sync()
        r = tv.load_shared(s, [0, 0], [16, 16])
        tv.print("m", m + e)
        tv.annotate_layout(w, local(1, 1).spatial(16, 2).local(1, 8))
        tv.free_shared(s)
        tv.print(packed.to(tv.f16) + r.sum(0).to(tv.f16).max(0))

    p = verified(k.specialize())
    ops = outline(p.body)
    assert ops[:6] == ["global_view", "load_global", "load_global", "full", "dot", "reduce"]
    assert {"view", "cast", "where", "alloc_shared", "store_shared", "sync", "load_shared",
            "print", "annotate_layout", "free_shared", "elementwise.exp"} <= set(ops)
    view = instructions(p, ins.View)[0]
    assert view.out.dtype == tv.uint4 and view.out.shape == (512,)
    dot = instructions(p, ins.Dot)[0]
    assert dot.out.dtype == tv.f32 and dot.out.shape == (16, 16)
    keep = [r for r in instructions(p, ins.Reduce) if r.keepdim]
    assert keep and keep[0].out.shape == (16, 1)


# ---- errors ------------------------------------------------------------------------------

def helper_that_branches(x):
    if x > 0:                                   # a Python if on a runtime value
        return x
    return -x


def test_runtime_value_as_python_bool():
    @tv.kernel
    def k(x: tv.ptr("f32"), n: tv.int32):
        y = helper_that_branches(n)             # the kernel line
        tv.store_global(tv.global_view(x, [n]), tv.zeros([1]), [y])

    err = error_of(k.specialize)
    assert "a runtime value cannot be a Python bool; use tv.where or a runtime if" in str(err)
    assert err.loc.file == HERE and err.loc.line == line_of(k, "# the kernel line")

    @tv.kernel
    def k2(x: tv.ptr("f32"), n: tv.int32):
        assert n > 0                            # assert
    err = error_of(k2.specialize)
    assert "Python bool" in err.message and err.loc.line == line_of(k2, "# assert")


def test_break_in_a_runtime_loop():
    @tv.kernel
    def k(x: tv.ptr("f32"), n: tv.int32):
        for i in tv.range(n):
            if i > 3:
                break                           # here
    err = error_of(k.specialize)
    assert "`break` inside a runtime if" in err.message
    assert err.loc.line == line_of(k, "# here")

    @tv.kernel
    def k2(x: tv.ptr("f32"), n: tv.int32):
        for _ in range(n):
            continue                            # here
    err = error_of(k2.specialize)
    assert "`continue` inside a runtime for loop" in err.message
    assert err.loc.line == line_of(k2, "# here")

    @tv.kernel
    def k3(x: tv.ptr("f32"), n: tv.int32):
        if n > 1:
            return                              # here
    err = error_of(k3.specialize)
    assert "`return` inside a runtime if" in err.message
    assert err.loc.line == line_of(k3, "# here")


def test_variable_defined_only_in_a_runtime_branch():
    @tv.kernel
    def k(x: tv.ptr("f32"), n: tv.int32):
        g = tv.global_view(x, [n])
        if n > 4:                               # the if
            v = tv.zeros([4])
        tv.store_global(g, v, [0])              # use
    err = error_of(k.specialize)
    assert err.message == (f"v is assigned only inside a runtime if at line "
                           f"{line_of(k, '# the if')}; define it before the if")
    assert err.loc.line == line_of(k, "# use")

    @tv.kernel
    def k2(x: tv.ptr("f32"), n: tv.int32):
        for i in tv.range(n):                   # the loop
            t = i * 2
        tv.store_global(tv.global_view(x, [n]), tv.zeros([4]), [t])  # use
    err = error_of(k2.specialize)
    assert err.message == (f"t is assigned only inside a runtime for loop at line "
                           f"{line_of(k2, '# the loop')}; define it before the for")
    assert err.loc.line == line_of(k2, "# use")

    @tv.kernel
    def k3(x: tv.ptr("f32"), n: tv.int32):
        for i in tv.range(n):  # noqa: B007
            pass
        tv.print(i)                             # use
    err = error_of(k3.specialize)
    assert "i is the variable of the runtime loop" in err.message
    assert err.loc.line == line_of(k3, "# use")


def test_a_store_into_an_outer_container_inside_a_runtime_loop_is_an_error():
    # `ahead[0] = ...` would run once at compile time: every iteration would read the
    # first tile. The error names the store's line and the loop.
    @tv.kernel
    def k(x: tv.ptr("f32"), y: tv.ptr("f32"), n: tv.int32):
        g = tv.global_view(x, [4 * n])
        ahead = [tv.load_global(g, [0], [4])]
        acc = tv.zeros([4])
        for i in tv.range(n):                   # the loop
            acc = acc + ahead[0]
            ahead[0] = tv.load_global(g, [4 * i + 4], [4])  # the store
        tv.store_global(tv.global_view(y, [4]), acc, [0])
    err = error_of(k.specialize)
    assert "stores into ahead, a Python object bound before the runtime for loop at line " \
        f"{line_of(k, '# the loop')}" in err.message
    assert "`ahead[0] = ...`" in err.message
    assert err.loc.line == line_of(k, "# the store")

    @tv.kernel
    def k2(x: tv.ptr("f32"), n: tv.int32):
        box = {"t": 0}
        for i in tv.range(n):  # noqa: B007
            if n > 2:
                box["t"] += 1                   # the store
    err = error_of(k2.specialize)
    assert "stores into box" in err.message and err.loc.line == line_of(k2, "# the store")

    # Carried by name (and a list built inside the loop): the values rotate at run time.
    @tv.kernel
    def ok(x: tv.ptr("f32"), y: tv.ptr("f32"), n: tv.int32):
        g = tv.global_view(x, [4 * n])
        ahead = tv.load_global(g, [0], [4])
        acc = tv.zeros([4])
        for i in tv.range(n - 1):
            parts = [ahead]
            parts[0] = parts[0] * 2.0
            acc = acc + parts[0]
            ahead = tv.load_global(g, [4 * i + 4], [4])
        tv.store_global(tv.global_view(y, [4]), acc, [0])
    x = np.arange(12, dtype=np.float32)
    y = np.zeros(4, np.float32)
    ok.interpret(x, y, 3)
    assert y.tolist() == (2 * (x[:4] + x[4:8])).tolist()


@pytest.mark.parametrize("body, words", [
    ("try:\n        pass\n    except Exception:\n        pass", "try/except is not supported"),
    ("with open('f') as f:\n        pass", "with statements are not supported"),
    ("def inner():\n        pass", "define helper functions at module level"),
    ("global G", "global is not supported"),
    ("while n > 0:\n        pass", "while loops over runtime values are not supported"),
    ("return 1", "cannot return a value"),
    ("for i in tv.range(n):\n        p = (3,)", "cannot be reassigned inside the runtime for"),
])
def test_unsupported_statements(tmp_path, body, words):
    source = ("from tilevm.vm import lang as tv\n\np = 1\n\n"
              "@tv.kernel\ndef k(x: tv.ptr('f32'), n: tv.int32):\n    p = (2,)\n    " + body + "\n")
    path = tmp_path / "kernel_mod.py"
    err = error_of(load_module(path, source)["k"].specialize)
    assert words in err.message
    bad_line = 9 if "reassigned" in words else 8
    assert err.loc == type(err.loc)(str(path), bad_line)


def test_bad_constants():
    err = error_of(vector_add.specialize, blok=4)
    assert "no compile-time constant 'blok'" in err.message and "block=1024" in err.message

    @tv.kernel
    def k(x: tv.ptr("f32"), *, size: int, dtype=tv.f16):
        pass
    err = error_of(k.specialize)
    assert "needs the compile-time constant(s) size" in err.message
    assert "size, dtype=dtypes.f16" in err.message
    err = error_of(k.specialize, size=[np.zeros(2)])
    assert "not hashable" in err.message


def test_bad_signatures():
    with pytest.raises(VMError, match="parameter n has no annotation"):
        @tv.kernel
        def k(x: tv.ptr("f32"), n):
            pass

    with pytest.raises(VMError, match="cannot have a default"):
        @tv.kernel
        def k2(x: tv.ptr("f32"), block: int = 4):
            pass


def test_calls_outside_a_kernel():
    err = error_of(tv.block_idx, 0)
    assert "tv.block_idx can only be used inside a @tv.kernel function" in err.message
    err = error_of(tv.zeros, [4])
    assert "tv.full can only be used inside a @tv.kernel" in err.message
    assert tv.cdiv(10, 4) == 3 and tv.max(2, 5) == 5  # pure on Python numbers
    with pytest.raises(VMError, match="not called directly"):
        vector_add(1, 2, 3, 4)


def test_user_exception_inside_a_kernel_names_the_line():
    @tv.kernel
    def k(x: tv.ptr("f32"), n: tv.int32, *, block: int = 3):
        g = tv.global_view(x, [n])
        if block % 2:
            raise ValueError(f"block must be even, got {block}")  # raise
        tv.store_global(g, tv.zeros([block]), [0])
    err = error_of(k.specialize)
    assert err.message == "ValueError: block must be even, got 3"
    assert err.loc.line == line_of(k, "# raise")
    assert isinstance(err.__context__, ValueError)

    @tv.kernel
    def k2(x: tv.ptr("f32"), n: tv.int32):
        g = tv.global_view(x, [n])
        a = tv.load_global(g, [0], [4])
        b = tv.load_global(g, [0], [8])
        tv.store_global(g,
                        a + b, [0])             # mismatch
    err = error_of(k2.specialize)
    assert "tile shapes [4] and [8] do not broadcast" in err.message
    assert err.loc.line == line_of(k2, "# mismatch")
    assert f"{HERE}:{err.loc.line}" in str(err)

    @tv.kernel
    def k3(x: tv.ptr("f32"), n: tv.int32):
        g = tv.global_view(x, [n])
        tv.load_global(g, [0], [n])             # runtime shape
    err = error_of(k3.specialize)
    assert "must be a compile-time int" in err.message
    assert err.loc.line == line_of(k3, "# runtime shape")

    @tv.kernel
    def k4(x: tv.ptr("f32"), *, block: int = 3):
        tv.static_assert(block % 2 == 0, "block must be even")  # static
    err = error_of(k4.specialize)
    assert err.message == "static_assert failed: block must be even"
    assert err.loc.line == line_of(k4, "# static")


def test_carried_type_changes_are_errors():
    @tv.kernel
    def k(x: tv.ptr("f32"), n: tv.int32):
        s = 0
        for _ in tv.range(n):
            s = s + 0.5                         # here
        tv.print(s)
    err = error_of(k.specialize)
    assert "s changes type inside the runtime for loop" in err.message
    assert err.loc.line == line_of(k, "# here")

    @tv.kernel
    def k2(x: tv.ptr("f32"), n: tv.int32):
        acc = tv.zeros([4])
        for _ in tv.range(n):
            acc = tv.zeros([8])                 # here
        tv.print(acc)
    err = error_of(k2.specialize)
    assert "a carried tile keeps its dtype and shape" in err.message
    assert err.loc.line == line_of(k2, "# here")


def test_argument_errors_of_tv_functions(tmp_path):
    def build(index: int, body: str) -> tv.Kernel:
        source = ("from tilevm.vm import lang as tv\nfrom tilevm.layouts import local\n"
                  "@tv.kernel\ndef f(x: tv.ptr('f32'), n: tv.int32):\n"
                  "    g = tv.global_view(x, [n, n])\n"
                  "    a = tv.load_global(g, [0, 0], [4, 4])\n"
                  f"    {body}\n")
        return load_module(tmp_path / f"args_{index}.py", source)["f"]

    cases = [
        ("tv.load_global(g, [0], [4, 4])", "1 offset(s) for a 2-d tensor"),
        ("tv.load_global(g, [0, 0], [4])", "shape [4] for a 2-d tensor"),
        ("tv.load_global(g, [0, 0], [4, 4], layout=local(2, 2))",
         "covers shape [2, 2], the tile has shape [4, 4]"),
        ("tv.dot(a, tv.zeros([8, 4]))", "do not multiply"),
        ("tv.max(a, a)", "tv.maximum(a, b)"),
        ("tv.store_global(a, a, [0, 0])", "must be a global tile"),
        ("a + g", "load it first with tv.load_global"),
        ("tv.load_global(g, [0, 0], [4, 4]).to(tv.int32) / 2", "use //"),
        ("tv.grid(tv.block_idx(0))", "scalar parameters and constants only"),
        ("tv.grid(n); tv.grid(n)", "tv.grid is called twice"),
        ("tv.view(a, tv.f16, [4, 4], None)", "needs the layout of the result"),
        ("tv.where(a, a, 0.0)", "must be a bool tile"),
        ("[i for i in tv.range(n)]", "must be a `for` statement of the kernel itself"),
    ]
    for index, (body, words) in enumerate(cases):
        err = error_of(build(index, body).specialize)
        assert words in err.message, (body, err.message)
        assert err.loc is not None and err.loc.line == 7, body

    @tv.kernel
    def k(x: tv.ptr("f32"), n: tv.int32):
        m = tv.where(n > 2, n, 5)
        f = tv.cast(n, tv.f32) * 0.5
        tv.print(tv.max(m, tv.cdiv(n, 8)) + tv.abs(-n))
        tv.print(f)

    p = k.specialize()
    first, second = instructions(p, ins.Print)
    n = Var("n", tv.int32)
    assert first.value.lhs == Binary("max", Select(Binary(">", n, Const(2, tv.int32)), n,
                                                   Const(5, tv.int32)),
                                     Binary("cdiv", n, Const(8, tv.int32)))
    assert second.value.dtype == tv.f32


# ---- the interpreter runs what the frontend builds ---------------------------------------

def test_interpret_vector_add_and_row_sum():
    interpreter = pytest.importorskip("tilevm.vm.interpreter")
    del interpreter
    x = np.arange(1000, dtype=np.float32)
    y = np.full(1000, 2.0, dtype=np.float32)
    out = np.zeros(1000, dtype=np.float32)
    vector_add.interpret(x, y, out, 1000, block=256)
    np.testing.assert_array_equal(out, x + y)

    rows = np.arange(24 * 4, dtype=np.float16).reshape(24, 4) / 8
    res = np.zeros(4, dtype=np.float32)
    row_sum.interpret(rows, res, n=24)
    np.testing.assert_allclose(res, rows.astype(np.float64).sum(0) * 3)
