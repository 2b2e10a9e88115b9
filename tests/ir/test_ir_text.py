"""The IR's text form: printer/parser round trips, golden files, and parse errors.

Golden files (tests/golden/*.vm) are the printer's output for hand-built programs; they
were reviewed by eye once and now guard the format's stability. After an intended format
change, regenerate them with `TILEVM_UPDATE_GOLDEN=1 pytest tests/ir/test_ir_text.py` and
review the diff.
"""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_harness import GOLDEN
from program_strategies import ci_examples, valid_programs

from tilevm.dtypes import parse as dtype
from tilevm.ir.builder import Builder
from tilevm.ir.errors import SourceLoc, VMError
from tilevm.ir.expr import (
    ARITHMETIC_OPS,
    BITWISE_OPS,
    BOOL,
    COMPARISON_OPS,
    FLOAT32,
    INT32,
    LOGICAL_OPS,
    Binary,
    BlockIndex,
    Const,
    ScalarCast,
    Select,
    Unary,
    Var,
    const,
    format_expr,
)
from tilevm.ir.expr_parser import ParseError, parse_expr, parse_type
from tilevm.ir.parser import parse_program
from tilevm.ir.printer import format_program
from tilevm.ir.types import MemorySpace, TensorType, format_type
from tilevm.layouts import register_layout as rl
from tilevm.layouts import shared_layout as sl

# ---- round trips ---------------------------------------------------------------------------

@settings(max_examples=ci_examples(50))
@given(valid_programs())
def test_program_round_trip(program):
    text = format_program(program)
    parsed = parse_program(text)
    assert parsed == program
    assert format_program(parsed) == text


VARS = [Var("n", INT32), Var("i.1", INT32), Var("x_2", dtype("int64")), Var("f", FLOAT32),
        Var("h.3.1", dtype("f16")), Var("b", BOOL)]
SCOPE = {v.name: v for v in VARS}

leaf_exprs = st.one_of(
    st.sampled_from(VARS),
    st.integers(-2**31, 2**31 - 1).map(const),
    st.floats(allow_nan=False).map(const),
    st.booleans().map(const),
    st.builds(Const, st.integers(-128, 255) | st.floats(allow_nan=False) | st.booleans(),
              st.sampled_from([dtype(n) for n in ("int8", "uint4", "f16", "bf16", "int64",
                                                  "uint1", "f4e2m1", "int32", "f32")])),
    st.builds(BlockIndex, st.integers(0, 2)),
)


def _extend(inner):
    return st.one_of(
        st.builds(Binary, st.sampled_from(ARITHMETIC_OPS + BITWISE_OPS + COMPARISON_OPS
                                          + LOGICAL_OPS), inner, inner),
        st.builds(Unary, st.sampled_from(["-", "not", "~"]), inner),
        st.builds(Select, inner, inner, inner),
        st.builds(ScalarCast, inner, st.sampled_from([dtype("f16"), INT32, dtype("uint8")])),
    )


any_exprs = st.recursive(leaf_exprs, _extend, max_leaves=12)


@given(any_exprs)
def test_expr_round_trip(expr):
    text = format_expr(expr)
    assert parse_expr(text, SCOPE) == expr
    assert parse_expr(text, VARS) == expr  # an iterable of Vars is a scope too


@pytest.mark.parametrize(("text", "expected"), [
    ("-3", Const(-3, INT32)),
    ("(-3)", Unary("-", Const(3, INT32))),
    ("f16(-3)", ScalarCast(Const(-3, INT32), dtype("f16"))),
    ("f16((-3))", ScalarCast(Unary("-", Const(3, INT32)), dtype("f16"))),
    ("min(-3, n)", Binary("min", Const(-3, INT32), SCOPE["n"])),
    ("(n - -3)", Binary("-", SCOPE["n"], Const(-3, INT32))),
    ("(n - (-3))", Binary("-", SCOPE["n"], Unary("-", Const(3, INT32)))),
    ("-inf", Const(-math.inf, FLOAT32)),
    ("(-inf)", Unary("-", Const(math.inf, FLOAT32))),
    ("(-n)", Unary("-", SCOPE["n"])),
    ("(i.1 % 4)", Binary("%", SCOPE["i.1"], Const(4, INT32))),
    ("const(True, int32)", Const(True, INT32)),
    ("const(-0.5, f16)", Const(-0.5, dtype("f16"))),
    ("block_idx.z", BlockIndex(2)),
    ("((n < 1) and true)", Binary("and", Binary("<", SCOPE["n"], Const(1, INT32)),
                                  Const(True, BOOL))),
    ("select(b, 1.5, f)", Select(SCOPE["b"], Const(1.5, FLOAT32), SCOPE["f"])),
    ("cdiv(n, 128)", Binary("cdiv", SCOPE["n"], Const(128, INT32))),
])
def test_expr_forms(text, expected):
    assert parse_expr(text, SCOPE) == expected


def test_nan_text_round_trip():
    # nan != nan, so programs holding it are compared by text
    b = Builder("k", 1)
    b.full(const(math.nan, "f16"), "f16", (32,), rl.spatial(32))
    b.full(math.nan, "f32", (32,))
    text = format_program(b.build())
    assert format_program(parse_program(text)) == text


def test_type_round_trip():
    n = Var("n", INT32)
    for t in (TensorType(MemorySpace.GLOBAL, dtype("int4"), (n, const(64))),
              TensorType(MemorySpace.SHARED, dtype("f16"), (32, 64), sl.swizzled((32, 64), "f16")),
              TensorType(MemorySpace.REGISTER, dtype("f32"), (16, 8),
                         rl.spatial(8, 4) * rl.local(2, 2))):
        assert parse_type(format_type(t), {"n": n}) == t


# ---- golden files ----------------------------------------------------------------------------

def vector_add():
    b = Builder("vector_add", num_warps=4)
    b.loc = SourceLoc("examples/vector_add.py", 10)
    x = b.pointer_param("x", "f16", readonly=True)
    y = b.pointer_param("y", "f16", readonly=True)
    out = b.pointer_param("out", "f16")
    n = b.scalar_param("n")
    block = 256
    b.set_grid(Binary("cdiv", n, const(block)))
    layout = rl.spatial(128) * rl.local(2)
    gx, gy, gout = (b.global_view(p, (n,)) for p in (x, y, out))
    start = b.let(Binary("*", BlockIndex(0), const(block)), "start")
    b.loc = SourceLoc("examples/vector_add.py", 14)
    a = b.load_global(gx, (start,), (block,), layout)
    c = b.load_global(gy, (start,), (block,), layout)
    s = b.elementwise("add", a, c)
    b.loc = None
    b.store_global(gout, s, (start,))
    return b.build()


def shared_tile_copy():
    b = Builder("tile_copy", num_warps=4)
    src = b.pointer_param("src", "int4", readonly=True)
    dst = b.pointer_param("dst", "int4")
    m, n = b.scalar_param("m"), b.scalar_param("n")
    b.set_grid(Binary("cdiv", m, const(64)), Binary("cdiv", n, const(128)))
    b.constants = (("BM", "64"), ("BN", "128"))
    gsrc = b.global_view(src, (m, n))
    gdst = b.global_view(dst, (m, n))
    row = b.let(Binary("*", BlockIndex(0), const(64)), "row")
    col = b.let(Binary("*", BlockIndex(1), const(128)), "col")
    smem = b.alloc_shared("int4", (64, 128), sl.swizzled((64, 128), "int4"))
    b.copy_async(smem, gsrc, (row, col))
    b.copy_async_commit()
    b.copy_async_wait(0)
    b.sync()
    packed = b.load_shared(smem, (0, 0), (64, 128), rl.spatial(8, 16) * rl.local(8, 8))
    b.free_shared(smem)
    with b.if_then(Binary("<", row, m)):
        b.store_global(gdst, packed, (row, col))
    with b.otherwise():
        b.print(row, "row out of range: ")
    return b.build()


def small_dot():
    b = Builder("small_dot", num_warps=1)
    pa = b.pointer_param("a", "f16", readonly=True)
    pb = b.pointer_param("b", "f16", readonly=True)
    pc = b.pointer_param("c", "f32")
    k = b.scalar_param("k")
    ga = b.global_view(pa, (16, k))
    gb = b.global_view(pb, (k, 8))
    gc = b.global_view(pc, (16, 8))
    acc = b.full(0.0, "f32", (16, 8), rl.spatial(8, 4) * rl.local(2, 2))
    with b.for_range(0, Binary("cdiv", k, const(16)), 1, name="kk", unroll=2) as kk:
        off = b.let(Binary("*", kk, const(16)), "off")
        a = b.load_global(ga, (0, off), (16, 16))
        bt = b.load_global(gb, (off, 0), (16, 8))
        b.annotate_layout(a, rl.spatial(8, 4) * rl.local(2, 4))
        new = b.dot(a, bt, acc)
        b.assign(acc, new)
    total = b.reduce("sum", acc, 1, keepdim=True)
    b.print(total, "row sums")
    b.store_global(gc, acc, (0, 0))
    return b.build()


GOLDEN_PROGRAMS = {"vector_add": vector_add, "tile_copy": shared_tile_copy,
                   "small_dot": small_dot}


@pytest.mark.parametrize("name", sorted(GOLDEN_PROGRAMS))
def test_golden(name):
    program = GOLDEN_PROGRAMS[name]()
    text = format_program(program)
    path = GOLDEN / f"{name}.vm"
    if os.environ.get("TILEVM_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()
    assert parse_program(path.read_text()) == program


# ---- errors ----------------------------------------------------------------------------------

HEADER = "kernel k(x: const ptr<f16>, y: ptr<f16>, n: int32) grid(cdiv(n, 32)) warps(1) {"
VIEW = "  %g = global_view ptr=x, offset=0, strides=(1,) : global<f16>[n]"
LOAD = "  %r = load_global src=%g, offsets=(0,), other=0 : register<f16>[32] {spatial(32)}"


def _error(*lines: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse_program("\n".join(lines) + "\n")
    assert isinstance(info.value, VMError)
    return info.value


def test_valid_base_program_parses():
    program = parse_program("\n".join([HEADER, VIEW, LOAD, "}"]))
    assert len(program.body.body) == 2


@pytest.mark.parametrize(("lines", "line", "words"), [
    # undefined names
    ([HEADER, "  let v: int32 = (m + 1)", "}"], 2, "undefined name 'm'"),
    ([HEADER, VIEW, "  %r = load_global src=%h, offsets=(0,) : register<f16>[32]", "}"], 3,
     "undefined tensor %h"),
    ([HEADER, "  %g = global_view ptr=z, offset=0, strides=(1,) : global<f16>[n]", "}"],
     2, "undefined pointer 'z'"),
    ([HEADER, "  w = 3", "}"], 2, "undefined variable 'w'"),
    ([HEADER, "  for i in range(0, n, 1) {", "  }", "  let v: int32 = i", "}"], 4,
     "undefined name 'i'"),
    ([HEADER, "  let v: int32 = (x + 1)", "}"], 2, "pointer, not a scalar"),
    # unknown things
    ([HEADER, "  frobnicate a=1", "}"], 2, "unknown instruction 'frobnicate'"),
    ([HEADER, VIEW, "  %r = load_global src=%g, offsets=(0,), colour=1 : register<f16>[32]",
      "}"], 3, "no field 'colour'"),
    ([HEADER, VIEW, "  %r = load_global src=%g : register<f16>[32]", "}"], 3,
     "needs field 'offsets'"),
    ([HEADER, "  %r = full value=0 : register<f17>[32]", "}"], 2, "unknown data type 'f17'"),
    ([HEADER, "  %r = full value=0 : stack<f16>[32]", "}"], 2, "unknown memory space"),
    ([HEADER, "  %r = full value=0 : register<f16>[32] {sideways(32)}", "}"], 2, "bad layout"),
    ([HEADER, "  %r = full value=0 : register<f16>[32] {spatial(32", "}"], 2, "unclosed"),
    ([HEADER, "  let v: int32 = frob(n)", "}"], 2, "unknown function"),
    ([HEADER, "  let v: int32 = n[0]", "}"], 2, "not allowed in an expression"),
    ([HEADER, "  let v: int32 = (0 < n < 4)", "}"], 2, "chained"),
    ([HEADER, "  let v: int32 = __import__('os')", "}"], 2, "unknown function"),
    ([HEADER, "  let v: int32 = block_idx.w", "}"], 2, "axes x, y and z"),
    # malformed lines
    ([HEADER, "  %r = full value=0", "}"], 2, "produces a tensor"),
    ([HEADER, "  sync : register<f16>[32]", "}"], 2, "produces no tensor"),
    ([HEADER, "  %r = full 0 : register<f16>[32]", "}"], 2, "expected FIELD=VALUE"),
    ([HEADER, "  !!!", "}"], 2, "expected an instruction name"),
    ([HEADER, "  let v: int32 = (n +", "}"], 2, "unclosed"),
    ([HEADER, "  let v: int32 = (n + )", "}"], 2, "malformed expression"),
    ([HEADER, "  let v: int32 = n)", "}"], 2, "unbalanced ')'"),
    ([HEADER, '  sync  @ "kernel.py"', "}"], 2, "malformed source location"),
    ([HEADER, "  print value=n, message='oops", "}"], 2, "unterminated string"),
    ([HEADER, "  print value=n, message=3", "}"], 2, "quoted string"),
    ([HEADER, "  copy_async_wait n=1.5", "}"], 2, "expected an integer"),
    ([HEADER, "  for i in range(0, n) {", "  }", "}"], 2, "start, stop and step"),
    ([HEADER, "  for i in range(0, n, 1) unrol 2 {", "  }", "}"], 2, "unroll N"),
    ([HEADER, "  while n {", "  }", "}"], 2, "malformed block statement"),
    (["kernal k() grid(1) warps(1) {", "}"], 1, "expected the program header"),
    (["kernel k(x ptr<f16>) grid(1) warps(1) {", "}"], 1, "malformed parameter"),
    (["kernel k() grid(1) {", "}"], 1, "needs warps"),
    (["kernel k(n: int32, n: int32) grid(1) warps(1) {", "}"], 1, "duplicate parameter"),
    (["", "# nothing here"], 1, "no program"),
    # braces
    ([HEADER, "  if (n > 0) {", "    sync", "}"], 1, "never closed"),
    ([HEADER, "  sync"], 1, "never closed"),
    ([HEADER, "  sync", "}", "}"], 4, "after the end of the program"),
    ([HEADER, "  sync", "  } else {", "}"], 3, "without an open if"),
    ([HEADER, "  %r = full value=0 : register<f16>[32]}", "}"], 2, "unbalanced '}'"),
    # duplicates
    ([HEADER, VIEW, VIEW, "}"], 3, "duplicate tensor name %g"),
    ([HEADER, "  let v: int32 = 1", "  let v: int32 = 2", "}"], 3, "already defined"),
])
def test_parse_errors(lines, line, words):
    err = _error(*lines)
    assert err.line == line
    assert words in str(err)
    assert f"line {line}:" in str(err)
    if line <= len(lines) and lines[line - 1].strip():
        assert lines[line - 1].strip() in str(err)  # the offending text is quoted


def test_parse_expr_errors():
    with pytest.raises(ParseError, match="undefined name 'q'"):
        parse_expr("(q + 1)", SCOPE)
    with pytest.raises(ParseError, match="not allowed"):
        parse_expr("'text'")
    with pytest.raises(ParseError, match="expected an expression"):
        parse_expr("  ")
    with pytest.raises(ParseError, match="keyword arguments"):
        parse_expr("min(a=1, b=2)")
    with pytest.raises(ParseError, match="takes 2 argument"):
        parse_expr("cdiv(4)")
    with pytest.raises(ParseError, match="unknown data type"):
        parse_expr("const(1, f99)")


mutations = st.tuples(st.integers(0, 10**6), st.sampled_from(
    ["delete", "(", ")", "{", "}", "%", ",", "=", "'", "@", " ", "\n", "x", "-", ":", "9"]))


@settings(max_examples=ci_examples(50))
@given(valid_programs(max_depth=1, max_stmts=3), st.lists(mutations, min_size=1, max_size=3))
def test_corrupted_text_gives_parse_errors(program, edits):
    """Damaged text parses to something or raises ParseError, never another exception."""
    text = format_program(program)
    for position, edit in edits:
        i = position % (len(text) + 1)
        text = text[:i] + text[i + 1:] if edit == "delete" else text[:i] + edit + text[i:]
    try:
        parse_program(text)
    except ParseError as err:
        assert err.line >= 0
