"""The reference interpreter (vm/interpreter.py) against independent numpy references."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import Phase, given, note, settings
from hypothesis import strategies as st

from tilevm import dtypes
from tilevm.ir.builder import Builder
from tilevm.ir.errors import SourceLoc, VMError
from tilevm.ir.expr import Binary, BlockIndex, Expr, ScalarCast, as_expr
from tilevm.layouts.register_layout import local, replicated, spatial
from tilevm.layouts.shared_layout import row_major, swizzled
from tilevm.vm import lang as tv
from tilevm.vm.interpreter import Interpreter, array_dtype, from_host, run, to_host

pytestmark = pytest.mark.filterwarnings("error")  # numpy warnings are bugs here


def here() -> SourceLoc:
    """The caller's source line."""
    frame = inspect.currentframe().f_back  # type: ignore[union-attr]
    return SourceLoc(frame.f_code.co_filename, frame.f_lineno)  # type: ignore[union-attr]


def bin_(op: str, a: Expr | int, b: Expr | int) -> Expr:
    return Binary(op, as_expr(a), as_expr(b))


def block_x() -> Expr:
    return BlockIndex(0)


# ---- vector add ---------------------------------------------------------------------------

def vector_add(dtype: str, tile: int, num_warps: int = 1):
    b = Builder("vadd", num_warps=num_warps)
    x = b.pointer_param("x", dtype, readonly=True)
    y = b.pointer_param("y", dtype, readonly=True)
    z = b.pointer_param("z", dtype)
    n = b.scalar_param("n")
    b.set_grid(bin_("cdiv", n, tile))
    threads = 32 * num_warps
    layout = spatial(threads).local(tile // threads) if tile >= threads else None
    gx, gy, gz = (b.global_view(p, [n]) for p in (x, y, z))
    start = bin_("*", block_x(), tile)
    xs = b.load_global(gx, [start], [tile], layout=layout)
    ys = b.load_global(gy, [start], [tile], layout=layout)
    b.store_global(gz, b.elementwise("add", xs, ys), [start])
    return b.build()


@settings(max_examples=25)
@given(n=st.integers(1, 700), tile=st.sampled_from([32, 64, 128]),
       dtype=st.sampled_from(["f16", "f32"]), seed=st.integers(0, 2**32 - 1))
def test_vector_add_ragged_tail(n, tile, dtype, seed):
    rng = np.random.default_rng(seed)
    np_dtype = array_dtype(dtype)
    x = rng.standard_normal(n).astype(np_dtype)
    y = rng.standard_normal(n).astype(np_dtype)
    z = np.full(n + 5, 7, dtype=np_dtype)  # a longer buffer: the tail must stay untouched
    run(vector_add(dtype, tile), [x, y, z, n])
    np.testing.assert_array_equal(z[:n], x + y)  # numpy rounds each add correctly too
    np.testing.assert_array_equal(z[n:], np.full(5, 7, dtype=np_dtype))


def test_vector_add_many_warps_and_zero_grid():
    prog = vector_add("f32", 256, num_warps=4)
    x = np.arange(1000, dtype=np.float32)
    z = np.zeros(1000, dtype=np.float32)
    run(prog, [x, x, z, 1000])
    np.testing.assert_array_equal(z, 2 * x)
    run(prog, [x[:0], x[:0], z[:0], 0])  # an empty grid runs no block


# ---- 2-D tiles, shared memory, swizzles -----------------------------------------------------

def tile_copy_via_shared(dtype: str, shape: tuple[int, int], shared_layout, store_layout,
                         load_layout, num_warps: int = 4):
    b = Builder("copy2d", num_warps=num_warps)
    src = b.pointer_param("src", dtype, readonly=True)
    dst = b.pointer_param("dst", dtype)
    rows, cols = shape
    gs = b.global_view(src, [rows, cols])
    gd = b.global_view(dst, [rows, cols])
    smem = b.alloc_shared(dtype, shape, shared_layout)
    r = b.load_global(gs, [0, 0], shape, layout=store_layout)
    b.store_shared(smem, r, [0, 0])
    b.sync()
    back = b.load_shared(smem, [0, 0], shape, layout=load_layout)
    b.store_global(gd, back, [0, 0])
    b.free_shared(smem)
    return b.build(), smem


@pytest.mark.parametrize("dtype, shape", [("f16", (32, 64)), ("int4", (16, 128)),
                                          ("f8e4m3", (16, 128)), ("int3", (16, 64))])
def test_tile_copy_through_swizzled_shared_memory(dtype, shape):
    dt = dtypes.parse(dtype)
    layout = swizzled(shape, dt)
    if dtype != "int3":
        assert layout.swizzle is not None  # the test must exercise a real swizzle
    store = spatial(16, 8).local(shape[0] // 16, shape[1] // 8)
    load = local(shape[0] // 16, 1).spatial(16, 8).local(1, shape[1] // 8)  # other owners
    prog, smem = tile_copy_via_shared(dtype, shape, layout, store, load)
    rng = np.random.default_rng(0)
    codes = rng.integers(0, dt.num_codes, shape[0] * shape[1])
    if dt.has_nan:  # keep NaN out so that the comparison is by value
        codes = np.where(np.isnan(dtypes.decode(codes, dt)), 0, codes)
    values = dtypes.decode(codes, dt)
    src = to_host(values, dt)
    dst = np.zeros_like(src)
    interp = Interpreter(prog)
    interp.run([src, dst])
    np.testing.assert_array_equal(dst, src)
    # the shared bytes sit where the layout says, swizzle and bit packing included
    alloc = interp.values[smem.name]
    bitpos = layout.all_offset_bits().reshape(-1)
    stored = [sum(((int(alloc.mem[(p + j) // 8]) >> ((p + j) % 8)) & 1) << j
                  for j in range(dt.bits)) for p in bitpos[:200]]
    np.testing.assert_array_equal(stored, codes[:200])


@settings(max_examples=15)
@given(m=st.integers(1, 40), n=st.integers(1, 40), ld_pad=st.integers(0, 3),
       seed=st.integers(0, 2**32 - 1))
def test_2d_ragged_edges_are_masked(m, n, ld_pad, seed):
    tm, tn = 16, 8
    b = Builder("add1", num_warps=1)
    src = b.pointer_param("src", "f32", readonly=True)
    dst = b.pointer_param("dst", "f32")
    rows, cols, ld = b.scalar_param("M"), b.scalar_param("N"), b.scalar_param("ld")
    b.set_grid(bin_("cdiv", cols, tn), bin_("cdiv", rows, tm))
    gs = b.global_view(src, [rows, cols], strides=[ld, 1])
    gd = b.global_view(dst, [rows, cols], strides=[ld, 1])
    offs = [bin_("*", BlockIndex(1), tm), bin_("*", BlockIndex(0), tn)]
    layout = spatial(4, 8).local(4, 1)
    t = b.load_global(gs, offs, [tm, tn], layout=layout, other=-1000.0)
    # the minimum sees `other` on ragged tiles
    low = b.reduce("min", b.reduce("min", t, 1, keepdim=True), 0, keepdim=True)
    s = b.elementwise("add", t, 1.0)
    b.store_global(gd, s, offs)
    flag = b.pointer_param("flag", "f32")
    gf = b.global_view(flag, [1, 1])
    b.store_global(gf, b.cast(b.elementwise("lt", low, -999.0), "f32"), [0, 0])
    prog = b.build()
    ld_ = n + ld_pad
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(m * ld_).astype(np.float32)
    out = np.full(m * ld_, 5.0, dtype=np.float32)
    flag_arr = np.zeros(1, dtype=np.float32)
    # params: src, dst, M, N, ld, flag (flag was declared last)
    run(prog, [a, out, m, n, ld_, flag_arr])
    want = np.full((m, ld_), 5.0, dtype=np.float32)
    want[:, :n] = a.reshape(m, ld_)[:, :n] + 1
    np.testing.assert_array_equal(out.reshape(m, ld_), want)
    # the last block saw the padding value iff its tile is ragged
    last_ragged = (m % tm != 0) or (n % tn != 0)
    assert flag_arr[0] == float(last_ragged)


# ---- view ---------------------------------------------------------------------------------

def view_program(nbytes_per_thread: int, out_dtype: str, out_per_thread: int):
    b = Builder("view", num_warps=1)
    packed = b.pointer_param("packed", "uint8", readonly=True)
    out = b.pointer_param("out", "f32")
    nb = 32 * nbytes_per_thread
    nout = 32 * out_per_thread
    g = b.global_view(packed, [nb])
    go = b.global_view(out, [nout])
    r = b.load_global(g, [0], [nb], layout=spatial(32).local(nbytes_per_thread))
    v = b.view(r, out_dtype, [nout], spatial(32).local(out_per_thread))
    b.store_global(go, b.cast(v, "f32"), [0])
    return b.build()


@pytest.mark.parametrize("dtype, nbytes, count", [("int4", 4, 8), ("int3", 3, 8),
                                                  ("f4e2m1", 4, 8), ("uint5", 5, 8),
                                                  ("f6e3m2", 3, 4), ("int1", 1, 8)])
def test_view_packed_bytes_as_lowbit_values(dtype, nbytes, count):
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, 32 * nbytes).astype(np.uint8)
    out = np.zeros(32 * count, dtype=np.float32)
    run(view_program(nbytes, dtype, count), [raw, out])
    want = dtypes.decode(dtypes.unpack(raw, dtypes.parse(dtype).bits, 32 * count), dtype)
    np.testing.assert_array_equal(out, want.astype(np.float32))


def test_view_round_trip_and_f16_bits():
    b = Builder("view2", num_warps=1)
    x = b.pointer_param("x", "f16", readonly=True)
    out = b.pointer_param("out", "f16")
    codes_out = b.pointer_param("codes", "int32")
    g, go, gc = b.global_view(x, [64]), b.global_view(out, [64]), b.global_view(codes_out, [64])
    h = b.load_global(g, [0], [64], layout=spatial(32).local(2))
    as_u8 = b.view(h, "uint8", [128], spatial(32).local(4))
    back = b.view(as_u8, "f16", [64], spatial(32).local(2))
    b.store_global(go, back, [0])
    as_u16 = b.view(h, "uint16", [64], spatial(32).local(2))
    b.store_global(gc, b.cast(as_u16, "int32"), [0])
    prog = b.build()
    x_arr = np.random.default_rng(2).standard_normal(64).astype(np.float16)
    out_arr = np.zeros(64, np.float16)
    c_arr = np.zeros(64, np.int32)
    run(prog, [x_arr, out_arr, c_arr])
    np.testing.assert_array_equal(out_arr, x_arr)
    np.testing.assert_array_equal(c_arr, x_arr.view(np.uint16).astype(np.int32))


def test_view_needs_layouts_and_equal_bits():
    b = Builder("badview", num_warps=1)
    r = b.full(1, "uint8", [32])
    b.loc = here()
    b.view(r, "int4", [64], spatial(32).local(2))
    with pytest.raises(VMError, match="both layouts must be given") as info:
        run(b.build(), [])
    assert info.value.loc is not None and info.value.loc.line > 0
    b = Builder("badview2", num_warps=1)
    r = b.full(1, "uint8", [32], layout=spatial(32))
    b.view(r, "int4", [64], spatial(16).local(4).replicated(2))  # 16 bits vs 8 a thread
    with pytest.raises(VMError, match="a view must preserve bits per thread"):
        run(b.build(), [])


def test_load_subbyte_global_pointer_at_odd_offsets():
    b = Builder("lowbit", num_warps=1)
    w = b.pointer_param("w", "int3", readonly=True)
    out = b.pointer_param("out", "int8")
    n = b.scalar_param("n")
    start = b.scalar_param("start")
    g = b.global_view(w, [n])
    go = b.global_view(out, [40])
    r = b.load_global(g, [start], [40], other=-4)
    b.store_global(go, b.cast(r, "int8"), [0])
    # and write int3 values back, packed, at an odd element offset
    w2 = b.pointer_param("w2", "int3")
    g2 = b.global_view(w2, [n])
    b.store_global(g2, r, [start])
    prog = b.build()
    rng = np.random.default_rng(3)
    vals = rng.integers(-4, 4, 101)
    packed = to_host(vals, "int3")
    out_arr = np.zeros(40, np.int8)
    dst = to_host(np.zeros(101), "int3")
    run(prog, [packed, out_arr, 101, 77, dst])
    want = np.full(40, -4)
    want[:24] = vals[77:101]
    np.testing.assert_array_equal(out_arr, want)
    got = from_host(dst, "int3", 101)
    np.testing.assert_array_equal(got[77:], vals[77:])
    np.testing.assert_array_equal(got[:77], np.zeros(77))


# ---- cast, elementwise, where, reduce, dot ----------------------------------------------------

def unary_program(in_dtype: str, out_dtype: str, n: int, make):
    b = Builder("unary", num_warps=1)
    x = b.pointer_param("x", in_dtype, readonly=True)
    y = b.pointer_param("y", out_dtype)
    gx, gy = b.global_view(x, [n]), b.global_view(y, [n])
    r = b.load_global(gx, [0], [n])
    b.store_global(gy, make(b, r), [0])
    return b.build()


@settings(max_examples=30)
@given(values=st.lists(st.floats(allow_nan=False, width=32), min_size=1, max_size=64),
       target=st.sampled_from(["f16", "f4e2m1", "bf16", "f8e4m3", "f8e5m2", "int8", "uint4"]))
def test_cast_matches_encode(values, target):
    x = np.array(values, dtype=np.float32)
    prog = unary_program("f32", target, x.size, lambda b, r: b.cast(r, target))
    y = to_host(np.zeros(x.size), target)
    run(prog, [x, y])
    want = dtypes.encode(x.astype(np.float64), target)
    if dtypes.parse(target).bits < 8:
        got = dtypes.unpack(y, dtypes.parse(target).bits, x.size)
    else:
        got = y.view(np.dtype(dtypes.parse(target).code_dtype))
    np.testing.assert_array_equal(got, want)


def test_cast_nan_to_finite_only_format_is_an_error():
    prog = unary_program("f32", "f4e2m1", 4, lambda b, r: b.cast(r, "f4e2m1"))
    with pytest.raises(VMError, match="NaN"):
        run(prog, [np.array([1, np.nan, 2, 3], np.float32), np.zeros(2, np.uint8)])


@settings(max_examples=20)
@given(a=st.lists(st.floats(-1e4, 1e4, width=32), min_size=16, max_size=16),
       c=st.lists(st.floats(-1e4, 1e4, width=32), min_size=16, max_size=16),
       op=st.sampled_from(["add", "sub", "mul", "div", "min", "max"]))
def test_f32_elementwise_is_correctly_rounded(a, c, op):
    b = Builder("ew", num_warps=1)
    pa, pc, po = (b.pointer_param(nm, "f32") for nm in ("a", "c", "o"))
    ga, gc, go = (b.global_view(p, [16]) for p in (pa, pc, po))
    ra, rc = b.load_global(ga, [0], [16]), b.load_global(gc, [0], [16])
    b.store_global(go, b.elementwise(op, ra, rc), [0])
    x, y = np.array(a, np.float32), np.array(c, np.float32)
    out = np.zeros(16, np.float32)
    with np.errstate(all="ignore"):
        run(b.build(), [x, y, out])
        want = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
                "min": np.minimum, "max": np.maximum}[op](x, y)
    np.testing.assert_array_equal(out, want)


def test_f16_unary_ops_and_scalar_operands():
    x = np.array([0.5, 1.0, 2.0, 3.0, 10.0, 0.1, 7.0, 65504.0], np.float16)
    for op, ref in [("sqrt", np.sqrt), ("exp", np.exp), ("log2", np.log2), ("neg", np.negative),
                    ("rsqrt", lambda v: 1 / np.sqrt(v))]:
        prog = unary_program("f16", "f16", 8, lambda b, r, op=op: b.elementwise(op, r))
        out = np.zeros(8, np.float16)
        run(prog, [x, out])
        with np.errstate(over="ignore"):
            want = ref(x.astype(np.float64)).astype(np.float16)
        np.testing.assert_array_equal(out, want, err_msg=op)
    prog = unary_program("f16", "f16", 8, lambda b, r: b.elementwise("mul", r, 3.0))
    out = np.zeros(8, np.float16)
    run(prog, [x, out])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, (x.astype(np.float64) * 3).astype(np.float16))


def test_integer_elementwise_wraps_and_floors():
    a = np.array([100, -100, 127, -128, 7, -7, 5, -1], np.int8)
    c = np.array([100, 100, 1, -1, 2, 2, -3, 3], np.int8)
    cases = {
        "add": lambda p, q: p + q, "mul": lambda p, q: p * q, "sub": lambda p, q: p - q,
        "div": lambda p, q: p // q, "mod": lambda p, q: p % q,
        "xor": lambda p, q: p ^ q, "shl": lambda p, q: p << np.abs(q),
        "shr": lambda p, q: p >> np.abs(q),
    }
    for op, ref in cases.items():
        b = Builder("iew", num_warps=1)
        pa, pc, po = (b.pointer_param(nm, "int8") for nm in ("a", "c", "o"))
        ga, gc, go = (b.global_view(p, [8]) for p in (pa, pc, po))
        ra, rc = b.load_global(ga, [0], [8]), b.load_global(gc, [0], [8])
        if op in ("shl", "shr"):
            rc = b.elementwise("abs", rc)
        b.store_global(go, b.elementwise(op, ra, rc), [0])
        out = np.zeros(8, np.int8)
        run(b.build(), [a, c, out])
        want = ref(a.astype(np.int64), c.astype(np.int64))
        want = ((want + 128) % 256 - 128).astype(np.int8)  # int8 wraparound
        np.testing.assert_array_equal(out, want, err_msg=op)


def test_integer_division_by_zero_is_an_error():
    prog = unary_program("int32", "int32", 4, lambda b, r: b.elementwise("div", r, 0))
    with pytest.raises(VMError, match="division by zero"):
        run(prog, [np.arange(4, dtype=np.int32), np.zeros(4, np.int32)])


def test_where_and_comparisons():
    def make(b, r):
        positive = b.elementwise("gt", r, 0.0)
        return b.where(positive, r, b.elementwise("mul", r, 0.25))

    x = np.random.default_rng(4).standard_normal(64).astype(np.float32)
    out = np.zeros(64, np.float32)
    run(unary_program("f32", "f32", 64, make), [x, out])
    np.testing.assert_array_equal(out, np.where(x > 0, x, x * np.float32(0.25)))


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("dim, keepdim", [(0, False), (1, True), (1, False)])
def test_reduce(op, dim, keepdim):
    shape = (8, 32)
    b = Builder("red", num_warps=1)
    x = b.pointer_param("x", "f16", readonly=True)
    y = b.pointer_param("y", "f32")
    gx = b.global_view(x, list(shape))
    r = b.load_global(gx, [0, 0], list(shape), layout=spatial(8, 4).local(1, 8))
    red = b.reduce(op, r, dim, keepdim=keepdim)
    red32 = b.cast(red, "f32")
    out_shape = red.type.static_shape
    gy = b.global_view(y, list(out_shape))
    b.store_global(gy, red32, [0] * len(out_shape))
    xs = np.random.default_rng(5).standard_normal(shape).astype(np.float16)
    out = np.zeros(int(np.prod(out_shape)), np.float32)
    run(b.build(), [xs.reshape(-1), out])
    ref = {"sum": np.sum, "max": np.max, "min": np.min}[op](xs.astype(np.float64), axis=dim,
                                                              keepdims=keepdim)
    np.testing.assert_array_equal(out.reshape(out_shape), ref.astype(np.float16))


@settings(max_examples=10)
@given(m=st.sampled_from([16, 32]), n=st.sampled_from([8, 16]), k=st.sampled_from([16, 64]),
       seed=st.integers(0, 2**32 - 1), in_dtype=st.sampled_from(["f16", "bf16"]))
def test_dot_f32_accumulation(m, n, k, seed, in_dtype):
    b = Builder("mma", num_warps=1)
    pa = b.pointer_param("a", in_dtype, readonly=True)
    pb = b.pointer_param("b", in_dtype, readonly=True)
    pc = b.pointer_param("c", "f32")
    ga, gb, gc = b.global_view(pa, [m, k]), b.global_view(pb, [k, n]), b.global_view(pc, [m, n])
    ra, rb = b.load_global(ga, [0, 0], [m, k]), b.load_global(gb, [0, 0], [k, n])
    rc = b.load_global(gc, [0, 0], [m, n])
    b.store_global(gc, b.dot(ra, rb, rc), [0, 0])
    rng = np.random.default_rng(seed)
    av = dtypes.decode(dtypes.encode(rng.standard_normal((m, k)), in_dtype), in_dtype)
    bv = dtypes.decode(dtypes.encode(rng.standard_normal((k, n)), in_dtype), in_dtype)
    cv = rng.standard_normal((m, n)).astype(np.float32)
    c_arr = cv.reshape(-1).copy()
    run(b.build(), [to_host(av, in_dtype), to_host(bv, in_dtype), c_arr])
    ref = av @ bv + cv.astype(np.float64)
    bound = 2 * (k + 1) * 2.0**-24 * (np.abs(av) @ np.abs(bv) + np.abs(cv))
    assert np.all(np.abs(c_arr.reshape(m, n) - ref) <= bound)


def test_dot_accumulates_in_float32_not_float64():
    """Each row of a @ b + c sums 1, 2^-11 and 2^-30 (signs and positions vary; the 1 is
    in c on some rows). In float32 the 2^-30 is lost whatever the order (it is under half
    an ulp of every partial sum that holds the 1), leaving 1 + 2^-11, which f16 rounds to
    even, 1; the exact sum (float64) rounds up to 1 + 2^-10 instead."""
    m, k, n = 16, 16, 8
    rng = np.random.default_rng(11)
    av = np.zeros((m, k))
    cv = np.zeros((m, n))
    for i in range(m):
        sign = rng.choice([-1.0, 1.0])
        cols = rng.permutation(k)[:3]
        av[i, cols] = sign * np.array([1.0, 2.0**-11, 2.0**-30])
        if i % 2:  # the 1 comes from c, added after the products
            av[i, cols[0]] = 0.0
            cv[i] = sign
    b = Builder("mma32", num_warps=1)
    pa = b.pointer_param("a", "bf16", readonly=True)
    pc = b.pointer_param("c", "f16")
    ga, gc = b.global_view(pa, [m, k]), b.global_view(pc, [m, n])
    ra = b.load_global(ga, [0, 0], [m, k])
    rb = b.full(1.0, "bf16", [k, n])
    rc = b.load_global(gc, [0, 0], [m, n])
    b.store_global(gc, b.dot(ra, rb, rc), [0, 0])
    c_arr = cv.astype(np.float16).reshape(-1)
    run(b.build(), [to_host(av, "bf16"), c_arr])
    products = av.astype(np.float32)  # b is all ones: every product is a's element
    sums = np.zeros(m, np.float32)
    for j in range(k):  # left to right; every order gives the same float32 sum here
        sums = sums + products[:, j]
    want = (sums[:, None] + cv.astype(np.float32)).astype(np.float16)
    exact = (av.sum(axis=1)[:, None] + cv).astype(np.float16)
    assert not np.any(want == exact)  # the test tells the two accumulations apart
    np.testing.assert_array_equal(c_arr.reshape(m, n), want)


def test_dot_int8_is_exact():
    b = Builder("imma", num_warps=1)
    pa, pb = b.pointer_param("a", "int8"), b.pointer_param("b", "int8")
    pc = b.pointer_param("c", "int32")
    ga, gb, gc = b.global_view(pa, [16, 32]), b.global_view(pb, [32, 8]), b.global_view(pc, [16, 8])
    ra, rb = b.load_global(ga, [0, 0], [16, 32]), b.load_global(gb, [0, 0], [32, 8])
    rc = b.full(0, "int32", [16, 8])
    b.store_global(gc, b.dot(ra, rb, rc), [0, 0])
    rng = np.random.default_rng(6)
    a = rng.integers(-128, 128, (16, 32)).astype(np.int8)
    bb = rng.integers(-128, 128, (32, 8)).astype(np.int8)
    c = np.zeros(16 * 8, np.int32)
    run(b.build(), [a, bb, c])
    np.testing.assert_array_equal(c.reshape(16, 8), a.astype(np.int64) @ bb.astype(np.int64))


# ---- control flow and scalars -----------------------------------------------------------------

def test_loop_with_scalar_accumulator_and_tile_accumulator():
    b = Builder("loop", num_warps=1)
    out = b.pointer_param("out", "int32")
    vec = b.pointer_param("vec", "f32")
    n = b.scalar_param("n")
    go, gv = b.global_view(out, [1]), b.global_view(vec, [32])
    acc = b.let(0, "acc")
    tile = b.full(0.0, "f32", [32], layout=spatial(32))
    with b.for_range(0, n, 1) as i:
        b.assign_var(acc, bin_("+", acc, bin_("*", i, i)))
        bumped = b.elementwise("add", tile, ScalarCast(i, dtypes.parse("f32")))
        b.assign(tile, bumped)
    with b.for_range(n, 0, -2) as j:  # a negative step
        b.assign_var(acc, bin_("-", acc, j))
    b.store_global(go, b.full(acc, "int32", [1]), [0])
    b.store_global(gv, tile, [0])
    prog = b.build()
    o = np.zeros(1, np.int32)
    v = np.zeros(32, np.float32)
    run(prog, [o, v, 9])
    assert o[0] == sum(i * i for i in range(9)) - sum(range(9, 0, -2))
    np.testing.assert_array_equal(v, np.full(32, sum(range(9)), np.float32))


def test_if_branches_per_block():
    b = Builder("branch", num_warps=1)
    out = b.pointer_param("out", "int32")
    b.set_grid(6)
    go = b.global_view(out, [6])
    with b.if_then(bin_("==", bin_("%", block_x(), 3), 0)):
        b.store_global(go, b.full(10, "int32", [1]), [block_x()])
    with b.otherwise():
        with b.if_then(bin_("==", bin_("%", block_x(), 3), 1)):
            b.store_global(go, b.full(20, "int32", [1]), [block_x()])
    o = np.zeros(6, np.int32)
    run(b.build(), [o])
    np.testing.assert_array_equal(o, [10, 20, 0, 10, 20, 0])


@pytest.mark.parametrize("expr, want", [
    (bin_("//", -7, 2), -4), (bin_("%", -7, 2), 1), (bin_("cdiv", 7, 2), 4),
    (bin_("cdiv", -7, 2), -3), (bin_("+", 2**31 - 1, 1), -(2**31)),
    (bin_("*", 65536, 65536), 0), (bin_("<<", 1, 31), -(2**31)), (bin_(">>", -8, 1), -4),
    (bin_("min", 3, -2), -2), (Binary("<", as_expr(1), as_expr(2)), 1),
    (ScalarCast(as_expr(2.5), dtypes.parse("int32")), 2),
    (ScalarCast(as_expr(3.5), dtypes.parse("int32")), 4),
    (ScalarCast(as_expr(1e10), dtypes.parse("int32")), 2**31 - 1),
])
def test_scalar_expression_semantics(expr, want):
    b = Builder("scalars", num_warps=1)
    out = b.pointer_param("out", "int32")
    go = b.global_view(out, [1])
    b.store_global(go, b.full(expr, "int32", [1]), [0])
    o = np.zeros(1, np.int32)
    run(b.build(), [o])
    assert o[0] == want


def test_print_only_block_zero(capsys):
    b = Builder("printer", num_warps=1)
    b.set_grid(3)
    b.print(b.full(2, "int32", [4]), "tile:")
    b.print(bin_("*", block_x(), 10), "bx:")
    run(b.build(), [])
    assert capsys.readouterr().out == "tile: [2 2 2 2]\nbx: 0\n"


def test_bf16_and_fp8_arguments_are_codes():
    x = np.array([1.5, -2.0, 3.0e38, 1e-3])
    prog = unary_program("bf16", "f8e4m3", 4, lambda b, r: b.cast(r, "f8e4m3"))
    src = to_host(x, "bf16")
    assert src.dtype == np.uint16
    dst = np.zeros(4, np.uint8)
    run(prog, [src, dst])
    want = dtypes.encode(dtypes.decode(dtypes.encode(x, "bf16"), "bf16"), "f8e4m3")
    np.testing.assert_array_equal(dst, want)


# ---- races --------------------------------------------------------------------------------

def race_program(sync: bool, load_layout):
    b = Builder("race", num_warps=1)
    out = b.pointer_param("out", "f32")
    go = b.global_view(out, [32])
    smem = b.alloc_shared("f32", [32], row_major((32,), "f32"))
    r = b.full(1.0, "f32", [32], layout=spatial(32))
    b.loc = here()
    store_line = b.loc.line
    b.store_shared(smem, r, [0])
    if sync:
        b.sync()
    b.loc = here()
    load_line = b.loc.line
    back = b.load_shared(smem, [0], [32], layout=load_layout)
    b.loc = None
    b.store_global(go, back, [0])
    return b.build(), store_line, load_line


def test_race_store_then_load_by_other_threads():
    rotated = spatial(2, 16).permute((1, 0)).reshape(32)  # thread t reads element != t
    assert rotated != spatial(32)
    prog, store_line, load_line = race_program(False, rotated)
    with pytest.raises(VMError, match="shared-memory race") as info:
        run(prog, [np.zeros(32, np.float32)])
    text = str(info.value)
    assert f":{store_line}" in text and f":{load_line}" in text
    assert "written by thread" in text and "read by thread" in text
    assert "without a sync between" in text
    assert info.value.loc is not None and info.value.loc.line == load_line
    # with a sync, or with the race checker off, the program is fine
    out = np.zeros(32, np.float32)
    run(race_program(True, rotated)[0], [out])
    np.testing.assert_array_equal(out, np.ones(32, np.float32))
    run(prog, [out], check_races=False)


def test_no_race_when_each_thread_reads_its_own_elements():
    out = np.zeros(32, np.float32)
    run(race_program(False, spatial(32))[0], [out])
    np.testing.assert_array_equal(out, np.ones(32, np.float32))


def test_unknown_layouts_race_and_replicated_writers():
    with pytest.raises(VMError, match="unknown thread"):
        run(race_program(False, None)[0], [np.zeros(32, np.float32)])
    # threads 2e and 2e+1 both write element e; thread e reading it races with one of them
    b = Builder("replicas", num_warps=1)
    smem = b.alloc_shared("f32", [16])
    b.store_shared(smem, b.full(1.0, "f32", [16], layout=spatial(16).replicated(2)), [0])
    b.load_shared(smem, [0], [16], layout=replicated(2).spatial(16))  # thread t: t % 16
    with pytest.raises(VMError, match="shared-memory race on %s.1.: written by thread 2 "):
        run(b.build(), [])
    # each replica may read back what the replicas wrote, without a sync ...
    layout = spatial(16).replicated(2)  # thread t holds element t // 2
    b = Builder("replicas2", num_warps=1)
    smem = b.alloc_shared("f32", [16])
    b.store_shared(smem, b.full(1.0, "f32", [16], layout=layout), [0])
    b.load_shared(smem, [0], [16], layout=layout)
    run(b.build(), [])
    # ... but not under another replicated layout (thread t holds element t % 16)
    b.load_shared(smem, [0], [16], layout=replicated(2).spatial(16))
    with pytest.raises(VMError, match="written by thread 2 .* read by thread 1 "):
        run(b.build(), [])


def test_write_after_read_race():
    b = Builder("war", num_warps=1)
    smem = b.alloc_shared("f32", [32])
    b.store_shared(smem, b.full(1.0, "f32", [32], layout=spatial(32)), [0])
    b.sync()
    b.loc = here()
    b.load_shared(smem, [0], [32], layout=spatial(32))
    b.loc = here()
    b.store_shared(smem, b.full(2.0, "f32", [32], layout=local(32).replicated(32)), [0])
    with pytest.raises(VMError, match="read by thread 1 at .* and written by thread 0 at"):
        run(b.build(), [])


def test_subbyte_elements_of_one_byte_owned_by_different_threads_do_not_race():
    b = Builder("nibbles", num_warps=1)
    smem = b.alloc_shared("int4", [64])
    b.store_shared(smem, b.full(3, "int4", [64], layout=spatial(32).local(2)), [0])
    other = local(2).spatial(32)  # thread t owns 2t, 2t+1 vs t, t+32: different owners
    same = spatial(32).local(2)
    b.load_shared(smem, [0], [64], layout=same)
    run(b.build(), [])
    b2 = Builder("nibbles2", num_warps=1)
    smem = b2.alloc_shared("int4", [64])
    b2.store_shared(smem, b2.full(3, "int4", [64], layout=spatial(32).local(2)), [0])
    b2.load_shared(smem, [0], [64], layout=other)
    with pytest.raises(VMError, match="shared-memory race"):
        run(b2.build(), [])


def copy_async_program(commit: bool, wait: bool, sync: bool):
    b = Builder("cpasync", num_warps=1)
    src = b.pointer_param("src", "f16", readonly=True)
    dst = b.pointer_param("dst", "f16")
    n = b.scalar_param("n")
    gs, gd = b.global_view(src, [n]), b.global_view(dst, [64])
    smem = b.alloc_shared("f16", [64])
    b.loc = here()
    b.copy_async(smem, gs, [0])
    b.loc = None
    if commit:
        b.copy_async_commit()
    if wait:
        b.copy_async_wait(0)
    if sync:
        b.sync()
    b.loc = here()
    r = b.load_shared(smem, [0], [64], layout=spatial(32).local(2))
    b.store_global(gd, r, [0])
    return b.build()


def test_copy_async_needs_commit_wait_and_sync():
    x = np.arange(50, dtype=np.float16)
    out = np.zeros(64, np.float16)
    run(copy_async_program(True, True, True), [x, out, 50])
    np.testing.assert_array_equal(out, np.concatenate([x, np.zeros(14, np.float16)]))
    for commit, wait, sync, match in [
            (False, False, True, "still in flight"),
            (False, True, True, "still in flight"),  # an uncommitted copy is never waited for
            (True, False, True, "still in flight"),
            (True, True, False, r"written by copy_async .* and read by thread")]:
        with pytest.raises(VMError, match=match) as info:
            run(copy_async_program(commit, wait, sync), [x, out, 50])
        assert "test_interpreter.py" in str(info.value)


def test_copy_async_groups_double_buffering():
    b = Builder("pipeline", num_warps=1)
    src = b.pointer_param("src", "f32", readonly=True)
    dst = b.pointer_param("dst", "f32")
    gs, gd = b.global_view(src, [128]), b.global_view(dst, [128])
    s0, s1 = b.alloc_shared("f32", [64]), b.alloc_shared("f32", [64])
    b.copy_async(s0, gs, [0])
    b.copy_async_commit()
    b.copy_async(s1, gs, [64])
    b.copy_async_commit()
    b.copy_async_wait(1)  # the first group is done, the second may still be in flight
    b.sync()
    r0 = b.load_shared(s0, [0], [64], layout=spatial(32).local(2))
    b.store_global(gd, r0, [0])
    b.copy_async_wait(0)
    b.sync()
    r1 = b.load_shared(s1, [0], [64], layout=spatial(32).local(2))
    b.store_global(gd, r1, [64])
    x = np.arange(128, dtype=np.float32)
    out = np.zeros(128, np.float32)
    run(b.build(), [x, out])
    np.testing.assert_array_equal(out, x)


# ---- lifetime, arguments, readonly ------------------------------------------------------------

def test_use_after_free_and_uninitialized_reads():
    b = Builder("uaf", num_warps=1)
    smem = b.alloc_shared("f32", [32])
    b.store_shared(smem, b.full(1.0, "f32", [32], layout=spatial(32)), [0])
    b.loc = here()
    free_line = b.loc.line
    b.free_shared(smem)
    b.loc = here()
    b.load_shared(smem, [0], [32], layout=spatial(32))
    with pytest.raises(VMError, match="after free_shared") as info:
        run(b.build(), [])
    assert f":{free_line}" in str(info.value)

    b = Builder("uninit", num_warps=1)
    smem = b.alloc_shared("int4", [64])
    b.store_shared(smem, b.full(1, "int4", [32], layout=spatial(32)), [0])
    b.sync()
    b.load_shared(smem, [0], [64], layout=spatial(32).local(2))
    with pytest.raises(VMError, match=r"never written"):
        run(b.build(), [])
    run(b.build(), [], check_uninitialized=False)


def test_bad_arguments_are_vm_errors():
    prog = vector_add("f16", 64)
    x = np.zeros(100, np.float16)
    good = [x, x, x.copy(), 100]
    run(prog, good)
    bad_cases = [
        ([x, x, x], "takes 4 argument"),
        ([x, x, x.astype(np.float32), 100], "float16"),
        ([x, x, list(x), 100], "numpy array"),
        ([x, x, x[:50], 100], "spans elements 0..99"),
        ([x, x, x.copy(), 100.5], "must be an int"),
        ([x, x, x.copy(), 2**40], "out of range"),
        ([x, x, np.zeros((10, 20), np.float16)[:, :10], 100], "C-contiguous"),
        ((x for _ in range(4)), "sequence"),
    ]
    for args, match in bad_cases:
        with pytest.raises(VMError, match=match):
            run(prog, args)
    # packed sub-byte pointers take uint8 bytes
    prog = unary_program("int4", "int4", 10, lambda b, r: r)
    with pytest.raises(VMError, match="uint8"):
        run(prog, [np.zeros(10, np.int8), np.zeros(5, np.uint8)])
    with pytest.raises(VMError, match="holds 8 element"):
        run(prog, [np.zeros(4, np.uint8), np.zeros(5, np.uint8)])


def test_store_through_readonly_pointer():
    b = Builder("ro", num_warps=1)
    x = b.pointer_param("x", "f32", readonly=True)
    g = b.global_view(x, [4])
    b.loc = here()
    b.store_global(g, b.full(1.0, "f32", [4]), [0])
    with pytest.raises(VMError, match="store to read-only parameter x") as info:
        run(b.build(), [np.zeros(4, np.float32)])
    assert info.value.loc is not None
    assert "store_global" in str(info.value)


def test_undefined_register_tensor_and_shape_mismatch():
    b = Builder("undef", num_warps=1)
    with b.if_then(False):
        t = b.full(1.0, "f32", [4])
    b.elementwise("add", t, t)
    with pytest.raises(VMError, match="defined in the if body and not visible here"):
        run(b.build(), [])
    b = Builder("badlayout", num_warps=1)
    b.full(1.0, "f32", [4], layout=spatial(8))
    with pytest.raises(VMError, match="a register layout must have its tensor's shape"):
        run(b.build(), [])


def test_free_while_copy_in_flight_and_annotate_layout_mismatch():
    b = Builder("freebusy", num_warps=1)
    src = b.pointer_param("src", "f32", readonly=True)
    smem = b.alloc_shared("f32", [32])
    b.copy_async(smem, b.global_view(src, [32]), [0])
    b.copy_async_commit()
    b.free_shared(smem)
    with pytest.raises(VMError, match="still in flight"):
        run(b.build(), [np.zeros(32, np.float32)])
    b = Builder("annot", num_warps=1)
    t = b.full(0.0, "f32", [32], layout=spatial(32))
    b.annotate_layout(t, spatial(32))
    run(b.build(), [])
    b.annotate_layout(t, local(32))
    with pytest.raises(VMError, match="annotate_layout"):
        run(b.build(), [])


def test_float_scalar_parameter_and_let():
    b = Builder("axpy", num_warps=1)
    x = b.pointer_param("x", "f32", readonly=True)
    y = b.pointer_param("y", "f32")
    alpha = b.scalar_param("alpha", "f32")
    gx, gy = b.global_view(x, [32]), b.global_view(y, [32])
    twice = b.let(bin_("*", alpha, 2.0), "twice")
    r = b.load_global(gx, [0], [32], layout=spatial(32))
    ry = b.load_global(gy, [0], [32], layout=spatial(32))
    b.store_global(gy, b.elementwise("add", b.elementwise("mul", r, twice), ry), [0])
    xs = np.arange(32, dtype=np.float32) / 7
    ys = np.ones(32, np.float32)
    want = xs * np.float32(0.1) * np.float32(2) + ys
    run(b.build(), [xs, ys, 0.1])  # 0.1 is rounded to f32 like a launch would
    np.testing.assert_array_equal(ys, want)


@settings(max_examples=30)
@given(dtype=st.sampled_from(["int1", "uint2", "int3", "f4e2m1", "f5e2m2", "f6e3m2", "uint7",
                              "int8", "f16", "bf16", "f32"]),
       rows=st.sampled_from([1, 3, 8, 16]), cols_bytes=st.sampled_from([16, 32, 64, 128]),
       kind=st.sampled_from(["row", "swizzled", "column"]), seed=st.integers(0, 2**32 - 1))
def test_shared_round_trip_any_width_and_layout(dtype, rows, cols_bytes, kind, seed):
    from tilevm.layouts.shared_layout import column_major

    dt = dtypes.parse(dtype)
    cols = cols_bytes * 8 // dt.bits
    shape = (rows, cols)
    make = {"row": row_major, "swizzled": swizzled, "column": column_major}[kind]
    layout = make(shape, dt) if kind != "swizzled" or rows >= 2 else row_major(shape, dt)
    prog, _ = tile_copy_via_shared(dtype, shape, layout, None, None, num_warps=1)
    # unknown layouts on both sides: the sync in the program makes that fine
    codes = np.random.default_rng(seed).integers(0, dt.num_codes, rows * cols)
    if dt.has_nan:
        codes = np.where(np.isnan(dtypes.decode(codes, dt)), 0, codes)
    src = to_host(dtypes.decode(codes, dt), dt)
    dst = np.zeros_like(src)
    run(prog, [src, dst])
    np.testing.assert_array_equal(dst, src)


# no shrinking: the generated programs are large and shrinking them takes minutes
@settings(max_examples=40, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(data=st.data(), n=st.integers(1, 12), m=st.integers(0, 8), seed=st.integers(0, 2**32 - 1))
def test_generated_valid_programs_run(data, n, m, seed):
    """Programs of the shared generator (tests/program_strategies.py, which keeps the
    verifier's rules) run to the end: no race and no other error, except the data-dependent
    ones (NaN converted to a type without NaN, an integer division by zero)."""
    from program_strategies import valid_programs

    from tilevm.ir.printer import format_program
    from tilevm.ir.types import Pointer

    prog = data.draw(valid_programs())
    note(format_program(prog))
    rng = np.random.default_rng(seed)
    args = []
    for p in prog.params:
        if isinstance(p, Pointer):
            dt = p.type.dtype
            codes = rng.integers(0, dt.num_codes, n * max(2 * n, 1024))
            if dt.has_nan:
                codes = np.where(np.isnan(dtypes.decode(codes, dt)), 0, codes)
            args.append(to_host(dtypes.decode(codes, dt), dt))
        else:
            args.append({"n": n, "m": m}.get(p.name, 0.5))
    try:
        run(prog, args)
    except VMError as exc:
        if "NaN" not in exc.message and "division by zero" not in exc.message:
            raise


def test_nan_bit_patterns_survive_data_movement():
    """Loads, stores, shared memory, where and views keep every bit of NaN codes (as the
    hardware does); arithmetic yields the format's canonical NaN."""
    b = Builder("nans", num_warps=1)
    x = b.pointer_param("x", "f16", readonly=True)
    y = b.pointer_param("y", "f16")
    z = b.pointer_param("z", "uint8")
    gx, gy, gz = b.global_view(x, [64]), b.global_view(y, [64]), b.global_view(z, [128])
    layout = spatial(32).local(2)
    r = b.load_global(gx, [0], [64], layout=layout)
    smem = b.alloc_shared("f16", [64])
    b.store_shared(smem, b.where(b.elementwise("ne", r, 0.0), r, 1.0), [0])
    back = b.load_shared(smem, [0], [64], layout=layout)
    b.store_global(gy, back, [0])
    as_f8 = b.view(back, "f8e4m3", [128], spatial(32).local(4))
    b.store_global(gz, b.view(as_f8, "uint8", [128], spatial(32).local(4)), [0])
    prog = b.build()
    rng = np.random.default_rng(7)
    codes = rng.integers(0, 2**16, 64, dtype=np.uint16)
    codes[:8] = [0x7C01, 0xFC01, 0x7E00, 0xFFFF, 0x7D55, 0x7C00, 0xFC00, 0x8001]
    codes[(codes & 0x7FFF) == 0] = 1  # +-0 would take the where() branch
    src = codes.view(np.float16)
    out = np.zeros(64, np.float16)
    raw = np.zeros(128, np.uint8)
    run(prog, [src, out, raw])
    np.testing.assert_array_equal(out.view(np.uint16), codes)
    np.testing.assert_array_equal(raw, codes.view(np.uint8))
    # arithmetic on a NaN gives the canonical NaN code
    prog = unary_program("f16", "f16", 2, lambda b, r: b.elementwise("add", r, 1.0))
    out = np.zeros(2, np.float16)
    run(prog, [np.array([0x7C01, 0xFD00], np.uint16).view(np.float16), out])
    assert out.view(np.uint16).tolist() == [0x7E00, 0x7E00]


def test_shift_amounts_are_unsigned():
    x = np.array([5, -5, 1, -1], np.int32)
    for op, amount, want in [("shl", 40, [0, 0, 0, 0]), ("shl", -4, [0, 0, 0, 0]),
                             ("shr", -1, [0, -1, 0, -1]), ("shl", 31, [-(2**31), -(2**31),
                                                                      -(2**31), -(2**31)])]:
        prog = unary_program("int32", "int32", 4,
                             lambda b, r, op=op, amount=amount: b.elementwise(op, r, amount))
        out = np.zeros(4, np.int32)
        run(prog, [x, out])
        assert out.tolist() == want, (op, amount)


# ---- the interpreter verifies first, and bounds its work ------------------------------------

def test_interpret_rejects_what_the_verifier_rejects_at_its_line():
    @tv.kernel(num_warps=1)
    def huge(out: tv.ptr(tv.f32)):
        tv.grid(1)
        tile = tv.zeros([2**40], tv.f32)  # 2^35 registers a thread
        tv.store_global(tv.global_view(out, [2**40]), tile, [0])

    with pytest.raises(VMError, match="needs 34359738368 32-bit registers per thread") as info:
        huge.interpret(np.zeros(4, np.float32))
    assert info.value.loc is not None
    assert "tile = tv.zeros([2**40], tv.f32)" in str(info.value)  # the line, quoted
    # `run` verifies too: a comparison's out must be bool, whatever it would compute
    b = Builder("cmp", num_warps=1)
    b.loc = here()
    b.elementwise("lt", b.full(1.0, "f32", [32]), 2.0, dtype="f32")
    with pytest.raises(VMError, match="a comparison gives bool") as info:
        run(b.build(), [])
    assert info.value.loc == b.loc


def blocks_and_loop_program():
    """Grid (n,); each block adds 1 to out[0] `trips` times (trips a scalar parameter)."""
    b = Builder("work", num_warps=1)
    out = b.pointer_param("out", "int32")
    n, trips = b.scalar_param("n"), b.scalar_param("trips")
    b.set_grid(n)
    g = b.global_view(out, [1])
    b.loc = here()
    with b.for_range(0, trips):
        b.atomic_add(g, [0], 1)
    return b.build()


def test_grid_and_loop_limits_refuse_up_front(monkeypatch):
    prog = blocks_and_loop_program()
    out = np.zeros(1, np.int32)
    with pytest.raises(VMError, match=r"2147483647 blocks, more than the interpreter runs "
                                      r"\(65536\); .*max_blocks=N.*TILEVM_INTERP_MAX_BLOCKS"):
        run(prog, [out, 2**31 - 1, 1])
    with pytest.raises(VMError, match=r"the loop has 2147483647 trips, more than the "
                                      r"interpreter runs \(1048576\); .*max_loop_trips=N"
                                      r".*TILEVM_INTERP_MAX_LOOP_TRIPS") as info:
        run(prog, [out, 1, 2**31 - 1])
    assert info.value.loc is not None and info.value.loc.line > 0
    assert out[0] == 0  # refused before anything ran
    # at the limit the program runs; the arguments and the environment move the limit
    run(prog, [out, 3, 4], max_blocks=3, max_loop_trips=4)
    assert out[0] == 12
    with pytest.raises(VMError, match=r"more than the interpreter runs \(2\)"):
        run(prog, [out, 3, 1], max_blocks=2)
    monkeypatch.setenv("TILEVM_INTERP_MAX_LOOP_TRIPS", "3")
    with pytest.raises(VMError, match=r"4 trips, more than the interpreter runs \(3\)"):
        run(prog, [out, 1, 4])
    monkeypatch.setenv("TILEVM_INTERP_MAX_LOOP_TRIPS", "many")
    with pytest.raises(ValueError, match="TILEVM_INTERP_MAX_LOOP_TRIPS='many' must be an "
                                         "integer"):
        run(prog, [out, 1, 1])
    with pytest.raises(ValueError, match="max_blocks must be an int >= 1"):
        run(prog, [out, 1, 1], max_blocks=0, max_loop_trips=1)
