"""Hypothesis strategies that generate random *valid* VM programs (built with `Builder`).

Used by the printer/parser round-trip tests and by the verifier's fuzzer:

    from program_strategies import valid_programs

    @given(valid_programs())
    def test_something(program): ...

Building blocks: `pointer_dtypes`, `tiles` (a register tile shape and a layout family for it),
`int_exprs(leaves)`, `bool_exprs(leaves)`, `register_layouts(num_threads)`,
`shared_layouts(shape, dtype)`, `source_locs`, and `valid_programs(max_depth, max_stmts)`.

What "valid" means here (the rules the generator keeps, so a verifier should accept every
program):

- every tensor is defined before use, and a tensor or scalar defined inside a loop or branch
  is only used inside it; `assign` and `assign_var` target values of an enclosing scope with
  the same type;
- register tensors of the main flow all have one tile shape; each has either the program's
  tile layout (whose thread count is the block's thread count) or no layout; operands of one
  elementwise op, `where` or `assign` never carry two different layouts;
- elementwise arithmetic only on f16/bf16/f32/int8/int32 tensors (sub-byte data is cast
  first), bitwise ops on integers, `not`/`and`/`or` on bool (uint1), comparisons give bool;
  a scalar operand is a constant of the tensor's dtype or an int32/f32 scalar of its kind;
- stores go through non-const pointers and store a tensor of the pointer's dtype;
- `load_shared`/`store_shared`/`copy_async` tiles lie inside the shared tensor, whose dtype
  matches; `copy_async` is followed by `copy_async_commit`, `copy_async_wait` and `sync`
  before the data is read; every alloc is freed in the scope that made it;
- `view` preserves bits per thread: `spatial(a, b).local(c, d)` over w-bit elements becomes
  `spatial(a, b).local(c, d * w // w')` over w'-bit ones (same spatial part);
- `dot` takes a[m, k] f16, b[k, n] f16, c[m, n] f32 with m, n, k in {16, 32}.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

from tilevm.dtypes import parse
from tilevm.ir.builder import Builder
from tilevm.ir.errors import SourceLoc
from tilevm.ir.expr import FLOAT32, Binary, BlockIndex, Expr, Select, Unary, Var, const
from tilevm.ir.types import Pointer, Tensor
from tilevm.layouts import register_layout as rl
from tilevm.layouts import shared_layout as sl

POINTER_DTYPES = ("f16", "bf16", "f32", "int8", "uint8", "int32", "int4", "uint4", "uint2",
                  "f4e2m1", "f6e3m2", "f8e4m3", "f8e5m2", "uint1")
ARITH_DTYPES = ("f16", "bf16", "f32", "int8", "int32")
FLOAT_UNARY = ("neg", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt")
FLOAT_BINARY = ("add", "sub", "mul", "div", "min", "max")
INT_UNARY = ("neg", "abs")
INT_BINARY = ("add", "sub", "mul", "mod", "min", "max", "and", "or", "xor", "shl", "shr")
COMPARISONS = ("lt", "le", "eq", "ne", "gt", "ge")


def ci_examples(count: int) -> int:
    """`count` examples under the `ci` profile (the default), for the slowest property
    tests over generated programs; under any other profile its own count (`thorough`
    keeps all of its examples)."""
    default = settings.default.max_examples
    return count if default == settings.get_profile("ci").max_examples else default


pointer_dtypes = st.sampled_from(POINTER_DTYPES)
source_locs = st.builds(SourceLoc, st.sampled_from(["kernel.py", "/src/my kernels/gemm.py"]),
                        st.integers(1, 500))


def _is_float(dtype: Any) -> bool:
    return parse(dtype).is_float


# ---- layouts and tiles ------------------------------------------------------------------

@dataclass(frozen=True)
class Tile:
    """A register tile: `shape = (a*c, b*d)` with `a*b` threads and `c*d` elements each."""

    spatial: tuple[int, int]
    local: tuple[int, int]
    order: str  # how the tile layout composes its spatial and local parts

    @property
    def shape(self) -> tuple[int, int]:
        return (self.spatial[0] * self.local[0], self.spatial[1] * self.local[1])

    def layout(self, local: tuple[int, int] | None = None) -> rl.RegisterLayout:
        sp, lo = self.spatial, local or self.local
        if self.order == "spatial*local":
            return rl.spatial(*sp) * rl.local(*lo)
        if self.order == "local*spatial":
            return rl.local(*lo) * rl.spatial(*sp)
        return rl.column_spatial(*sp) * rl.local(*lo)


@st.composite
def tiles(draw: Any, num_threads: int = 32) -> Tile:
    a = 2 ** draw(st.integers(0, int(math.log2(num_threads))))
    spatial = (a, num_threads // a)
    local = (draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2, 4])))
    order = draw(st.sampled_from(["spatial*local", "local*spatial", "column_spatial*local"]))
    return Tile(spatial, local, order)


@st.composite
def register_layouts(draw: Any, num_threads: int = 32) -> rl.RegisterLayout:
    """A simple register layout over `num_threads` threads (its shape follows from it)."""
    return draw(tiles(num_threads)).layout()


def shared_layouts(shape: tuple[int, ...], dtype: Any) -> st.SearchStrategy:
    """`row_major` or `swizzled` over `shape` and `dtype`."""
    options = [sl.row_major(shape, dtype)]
    if len(shape) >= 2:
        options.append(sl.swizzled(shape, dtype))
    return st.sampled_from(options)


# ---- scalar expressions -----------------------------------------------------------------

def int_exprs(leaves: list[Expr], max_depth: int = 2) -> st.SearchStrategy:
    """int32 expressions over `leaves` (int32 variables) and small constants."""
    base = st.one_of(st.integers(-4, 64).map(const), *([st.sampled_from(leaves)] if leaves
                                                         else []))

    def extend(inner: st.SearchStrategy) -> st.SearchStrategy:
        positive = st.integers(1, 16).map(const)
        return st.one_of(
            st.builds(Binary, st.sampled_from(["+", "-", "*", "min", "max"]), inner, inner),
            st.builds(Binary, st.sampled_from(["//", "%", "cdiv"]), inner, positive),
            st.builds(Binary, st.sampled_from(["&", "|", "^", "<<", ">>"]), inner,
                      st.integers(0, 4).map(const)),
            st.builds(Unary, st.sampled_from(["-", "~"]), inner),
            st.builds(Select, bool_exprs(leaves, 0), inner, inner),
        )

    return st.recursive(base, extend, max_leaves=2 ** max_depth)


def bool_exprs(leaves: list[Expr], max_depth: int = 1) -> st.SearchStrategy:
    """bool conditions: comparisons of int expressions, `and`/`or`/`not`, true/false."""
    ints = st.one_of(st.integers(-4, 64).map(const), *([st.sampled_from(leaves)] if leaves
                                                        else []))
    cmp = st.builds(Binary, st.sampled_from(["<", "<=", "==", "!=", ">", ">="]), ints, ints)
    base = st.one_of(cmp, st.booleans().map(const))
    if max_depth <= 0:
        return base
    return st.recursive(base, lambda inner: st.one_of(
        st.builds(Binary, st.sampled_from(["and", "or"]), inner, inner),
        st.builds(Unary, st.just("not"), inner)), max_leaves=3)


float_consts = st.one_of(st.sampled_from([0.0, 1.0, -2.5, 0.125, 1e-05, math.inf, -math.inf]),
                         st.floats(-100, 100, allow_nan=False, width=16))


# ---- the program generator ----------------------------------------------------------------

@dataclass
class _Scope:
    ints: list[Expr]
    floats: list[Expr]
    tensors: list[Tensor]                 # register tensors of the tile shape
    lets: list[Var]
    views: list[tuple[Tensor, Pointer]]   # global views (rank 2)
    others: list[Tensor] = field(default_factory=list)  # register tensors of other shapes

    def child(self) -> _Scope:
        return _Scope(list(self.ints), list(self.floats), list(self.tensors), list(self.lets),
                      list(self.views), list(self.others))


class _Gen:
    def __init__(self, draw: Any, b: Builder, tile: Tile, max_depth: int, max_stmts: int) -> None:
        self.draw, self.b, self.tile = draw, b, tile
        self.max_depth, self.max_stmts = max_depth, max_stmts
        self.layout = tile.layout()
        self.line = 0

    # -- helpers
    def maybe_loc(self) -> None:
        if self.draw(st.booleans()):
            self.line += self.draw(st.integers(1, 5))
            self.b.loc = SourceLoc(self.draw(st.sampled_from(["kernel.py", "lib/k.py"])),
                                   self.line)
        else:
            self.b.loc = None

    def int_expr(self, s: _Scope, depth: int = 1) -> Expr:
        return self.draw(int_exprs(s.ints, depth))

    def tile_layout(self) -> Any:
        return self.draw(st.sampled_from([self.layout, None]))

    def scalar_for(self, s: _Scope, dtype: Any) -> Expr:
        if _is_float(dtype):
            options = [const(self.draw(float_consts), dtype)] + s.floats
        else:
            t = parse(dtype)  # a constant in its type's range (the verifier checks it)
            lo, hi = max(-8, int(t.min_exact)), min(8, int(t.max_exact))
            options = [const(self.draw(st.integers(lo, hi)), dtype)] + [v for v in s.ints
                                                                        if isinstance(v, Var)]
        return self.draw(st.sampled_from(options))

    def arith_tensor(self, s: _Scope) -> Tensor:
        """A tile-shaped tensor of an arithmetic dtype (made if none exists)."""
        ok = [t for t in s.tensors if str(t.dtype) in ARITH_DTYPES]
        if ok and self.draw(st.booleans()):
            return self.draw(st.sampled_from(ok))
        if s.tensors and self.draw(st.booleans()):
            src = self.draw(st.sampled_from(s.tensors))
            return self.add(s, self.b.cast(src, self.draw(st.sampled_from(ARITH_DTYPES))))
        return self.full(s, self.draw(st.sampled_from(ARITH_DTYPES)))

    def full(self, s: _Scope, dtype: str, layout: Any = "tile") -> Tensor:
        value = self.scalar_for(s, dtype)
        layout = self.tile_layout() if layout == "tile" else layout
        return self.add(s, self.b.full(value, dtype, self.tile.shape, layout))

    def add(self, s: _Scope, t: Tensor) -> Tensor:
        s.tensors.append(t)
        return t

    def same_layout(self, t: Tensor, candidates: list[Tensor]) -> list[Tensor]:
        return [c for c in candidates if c.layout is None or t.layout is None
                or c.layout == t.layout]

    def offsets(self, s: _Scope) -> tuple[Expr, Expr]:
        rows = self.tile.shape[0]
        row = Binary("*", BlockIndex(0), const(rows))
        if self.draw(st.booleans()):
            row = Binary("+", row, self.int_expr(s, 1))
        return row, self.int_expr(s, 1)

    # -- statements
    def block(self, s: _Scope, depth: int) -> None:
        for _ in range(self.draw(st.integers(1, self.max_stmts))):
            self.stmt(s, depth)

    def stmt(self, s: _Scope, depth: int) -> None:
        kinds = ["load", "store", "full", "unary", "binary", "compare", "cast", "where",
                 "reduce", "shared", "copy_async", "view", "annotate", "print", "let",
                 "assign_var", "dot"]
        if depth < self.max_depth:
            kinds += ["for", "for", "if"]
        kind = self.draw(st.sampled_from(kinds))
        self.maybe_loc()
        getattr(self, f"s_{kind}")(s, depth)

    def s_load(self, s: _Scope, depth: int) -> None:
        g, _ = self.draw(st.sampled_from(s.views))
        other = 0.0 if _is_float(g.dtype) and self.draw(st.booleans()) else 0
        self.add(s, self.b.load_global(g, self.offsets(s), self.tile.shape, self.tile_layout(),
                                       other=other))

    def s_store(self, s: _Scope, depth: int) -> None:
        writable = [(g, p) for g, p in s.views if not p.type.readonly]
        if not writable:
            return self.s_load(s, depth)
        g, _ = self.draw(st.sampled_from(writable))
        ready = [t for t in s.tensors if t.dtype == g.dtype]
        if ready and self.draw(st.booleans()):
            src = self.draw(st.sampled_from(ready))
        else:
            src = self.add(s, self.b.cast(self.arith_tensor(s), g.dtype))
        self.b.store_global(g, src, self.offsets(s))

    def s_full(self, s: _Scope, depth: int) -> None:
        self.full(s, self.draw(st.sampled_from(POINTER_DTYPES + ARITH_DTYPES)))

    def s_unary(self, s: _Scope, depth: int) -> None:
        x = self.arith_tensor(s)
        ops = FLOAT_UNARY if _is_float(x.dtype) else INT_UNARY
        self.add(s, self.b.elementwise(self.draw(st.sampled_from(ops)), x))

    def s_binary(self, s: _Scope, depth: int) -> None:
        x = self.arith_tensor(s)
        ops = FLOAT_BINARY if _is_float(x.dtype) else INT_BINARY
        op = self.draw(st.sampled_from(ops))
        partners = [t for t in self.same_layout(x, s.tensors) if t.dtype == x.dtype]
        if partners and self.draw(st.booleans()):
            y: Tensor | Expr = self.draw(st.sampled_from(partners))
        else:
            y = self.scalar_for(s, x.dtype)
        args = (x, y) if self.draw(st.booleans()) or not isinstance(y, Expr) else (y, x)
        self.add(s, self.b.elementwise(op, *args))

    def compare(self, s: _Scope) -> Tensor:
        x = self.arith_tensor(s)
        return self.add(s, self.b.elementwise(self.draw(st.sampled_from(COMPARISONS)), x,
                                              self.scalar_for(s, x.dtype)))

    def s_compare(self, s: _Scope, depth: int) -> None:
        cond = self.compare(s)
        if self.draw(st.booleans()):
            self.add(s, self.b.elementwise("not", cond))

    def s_cast(self, s: _Scope, depth: int) -> None:
        src = self.draw(st.sampled_from(s.tensors)) if s.tensors else self.arith_tensor(s)
        self.add(s, self.b.cast(src, self.draw(st.sampled_from(POINTER_DTYPES + ARITH_DTYPES))))

    def s_where(self, s: _Scope, depth: int) -> None:
        cond = self.compare(s)
        x = self.arith_tensor(s)
        if cond.layout is not None and x.layout is not None and cond.layout != x.layout:
            return
        partners = [t for t in self.same_layout(x, self.same_layout(cond, s.tensors))
                    if t.dtype == x.dtype]
        if partners and self.draw(st.booleans()):
            y: Tensor | Expr = self.draw(st.sampled_from(partners))
        else:
            y = self.scalar_for(s, x.dtype)
        if cond.layout is None and x.layout is not None:
            cond = self.add(s, self.b.elementwise("ne", x, self.scalar_for(s, x.dtype)))
        self.add(s, self.b.where(cond, x, y))

    def s_reduce(self, s: _Scope, depth: int) -> None:
        x = self.arith_tensor(s)
        dim = self.draw(st.integers(0, 1))
        out = self.b.reduce(self.draw(st.sampled_from(["sum", "max", "min"])), x, dim,
                            keepdim=self.draw(st.booleans()))
        s.others.append(out)

    def s_shared(self, s: _Scope, depth: int) -> None:
        src = self.draw(st.sampled_from(s.tensors)) if s.tensors else self.arith_tensor(s)
        rows, cols = self.tile.shape
        copies = self.draw(st.integers(1, 2))
        shape = (rows * copies, cols)
        smem = self.b.alloc_shared(src.dtype, shape, self.draw(shared_layouts(shape, src.dtype)))
        at = (const(rows * self.draw(st.integers(0, copies - 1))), const(0))
        self.b.store_shared(smem, src, at)
        self.b.sync()
        self.add(s, self.b.load_shared(smem, at, self.tile.shape, self.tile_layout()))
        self.b.free_shared(smem)

    def s_copy_async(self, s: _Scope, depth: int) -> None:
        g, _ = self.draw(st.sampled_from(s.views))
        shape = self.tile.shape
        smem = self.b.alloc_shared(g.dtype, shape, self.draw(shared_layouts(shape, g.dtype)))
        self.b.copy_async(smem, g, self.offsets(s))
        self.b.copy_async_commit()
        self.b.copy_async_wait(0)
        self.b.sync()
        self.add(s, self.b.load_shared(smem, (0, 0), shape, self.tile_layout()))
        self.b.free_shared(smem)

    def s_view(self, s: _Scope, depth: int) -> None:
        # (source dtype, target dtype, how many target elements per source element)
        src_dtype, dst_dtype, ratio = self.draw(st.sampled_from([
            ("uint8", "int4", 2), ("uint8", "uint4", 2), ("uint8", "f4e2m1", 2),
            ("uint8", "uint2", 4), ("f16", "uint8", 2), ("f16", "bf16", 1), ("f32", "int32", 1),
            ("int4", "uint8", 0), ("f16", "int4", 4)]))
        c, d = self.tile.local
        spatial = rl.spatial(*self.tile.spatial)
        if ratio == 0:  # two narrow elements become one wide one: start from 2*d
            src_local, dst_local = (c, 2 * d), (c, d)
        else:
            src_local, dst_local = (c, d), (c, d * ratio)
        src_layout = spatial * rl.local(*src_local)
        dst_layout = spatial * rl.local(*dst_local)
        src_shape = tuple(a * lo for a, lo in zip(self.tile.spatial, src_local, strict=True))
        dst_shape = tuple(a * lo for a, lo in zip(self.tile.spatial, dst_local, strict=True))
        value = self.scalar_for(s, src_dtype)
        src = self.b.full(value, src_dtype, src_shape, src_layout)
        out = self.b.view(src, dst_dtype, dst_shape, dst_layout)
        s.others.append(out)
        if dst_shape == self.tile.shape and dst_layout == self.layout:
            s.tensors.append(out)

    def s_annotate(self, s: _Scope, depth: int) -> None:
        bare = [t for t in s.tensors if t.layout is None]
        if bare:
            self.b.annotate_layout(self.draw(st.sampled_from(bare)), self.layout)
        else:
            self.b.annotate_layout(self.full(s, "f32", None), self.layout)

    def s_print(self, s: _Scope, depth: int) -> None:
        message = self.draw(st.sampled_from(["", "acc", "x = ", "it's \"quoted\"", "a, b: c"]))
        pool = s.tensors + s.others
        if pool and self.draw(st.booleans()):
            self.b.print(self.draw(st.sampled_from(pool)), message)
        else:
            self.b.print(self.int_expr(s, 2), message)

    def s_let(self, s: _Scope, depth: int) -> None:
        if s.floats and self.draw(st.booleans()):
            f = self.draw(st.sampled_from(s.floats))
            value: Expr = Binary("*", f, Unary("-", self.draw(st.sampled_from(s.ints))))
            s.floats.append(self.b.let(value, "f"))
            return
        var = self.b.let(self.int_expr(s, 2), "v")
        s.ints.append(var)
        s.lets.append(var)

    def s_assign_var(self, s: _Scope, depth: int) -> None:
        if not s.lets:
            return self.s_let(s, depth)
        var = self.draw(st.sampled_from(s.lets))
        self.b.assign_var(var, Binary("+", var, self.int_expr(s, 1)))

    def s_dot(self, s: _Scope, depth: int) -> None:
        m, n, k = (self.draw(st.sampled_from([16, 32])) for _ in range(3))
        f16_views = [g for g, _ in s.views if str(g.dtype) == "f16"]
        if f16_views and self.draw(st.booleans()):
            g = self.draw(st.sampled_from(f16_views))
            a = self.b.load_global(g, (BlockIndex(0), 0), (m, k))
        else:
            a = self.b.full(const(1.0, "f16"), "f16", (m, k))
        bt = self.b.cast(self.b.full(self.int_expr(s, 1), "int32", (k, n)), "f16")
        c = self.b.full(0.0, "f32", (m, n))
        acc = self.b.dot(a, bt, c)
        if self.draw(st.booleans()):
            acc = self.b.dot(a, bt, acc)
        s.others.append(acc)

    def s_for(self, s: _Scope, depth: int) -> None:
        carried = self.arith_tensor(s) if self.draw(st.booleans()) else None
        stop = self.draw(st.sampled_from(s.ints + [const(self.draw(st.integers(0, 8)))]))
        step = self.draw(st.sampled_from([1, 1, 2]))
        unroll = self.draw(st.sampled_from([None, None, 1, 2, 4]))
        inner = s.child()
        with self.b.for_range(self.draw(st.integers(0, 2)), stop, step, unroll=unroll) as i:
            inner.ints.append(i)
            self.block(inner, depth + 1)
            if carried is not None:
                self.maybe_loc()
                y = self.scalar_for(inner, carried.dtype)
                new = self.b.elementwise("add" if _is_float(carried.dtype) else "max", carried, y)
                self.b.assign(carried, new)

    def s_if(self, s: _Scope, depth: int) -> None:
        with self.b.if_then(self.draw(bool_exprs(s.ints, 1))):
            self.block(s.child(), depth + 1)
        if self.draw(st.booleans()):
            with self.b.otherwise():
                self.block(s.child(), depth + 1)


@st.composite
def valid_programs(draw: Any, max_depth: int = 2, max_stmts: int = 4) -> Any:
    """A random valid `Program`: parameters, grid, global views, then a body of random
    statements nested at most `max_depth` deep, at most `max_stmts` per block."""
    num_warps = draw(st.sampled_from([1, 2]))
    b = Builder(draw(st.sampled_from(["kernel", "gemm_w4a16", "k2"])), num_warps)
    tile = draw(tiles(32 * num_warps))
    pointers = []
    for _ in range(draw(st.integers(1, 3))):
        pointers.append(b.pointer_param(draw(st.sampled_from(["x", "y", "out"])),
                                        draw(pointer_dtypes), readonly=draw(st.booleans())))
    if all(p.type.readonly for p in pointers):
        pointers.append(b.pointer_param("out", draw(pointer_dtypes)))
    n = b.scalar_param("n")
    ints: list[Expr] = [n, BlockIndex(0)]
    if draw(st.booleans()):
        m = b.scalar_param("m")
        ints.append(m)
    floats: list[Expr] = []
    if draw(st.booleans()):
        floats.append(b.scalar_param("alpha", FLOAT32))
    grid_kind = draw(st.sampled_from(["cdiv", "param", "const", "2d"]))
    rows = tile.shape[0]
    if grid_kind == "cdiv":
        b.set_grid(Binary("cdiv", n, const(rows)))
    elif grid_kind == "param":
        b.set_grid(n)
    elif grid_kind == "const":
        b.set_grid(draw(st.integers(1, 8)))
    else:
        b.set_grid(Binary("cdiv", n, const(rows)), draw(st.integers(1, 4)))
        ints.append(BlockIndex(1))
    if draw(st.booleans()):
        b.constants = (("BLOCK", repr(rows)), ("dtype", str(pointers[0].type.dtype)))
    gen = _Gen(draw, b, tile, max_depth, max_stmts)
    views = []
    for p in pointers:
        gen.maybe_loc()
        cols = draw(st.sampled_from([n, const(tile.shape[1] * 4), Binary("*", n, const(2))]))
        views.append((b.global_view(p, (n, cols)), p))
    scope = _Scope(ints, floats, [], [], views)
    gen.block(scope, 0)
    return b.build()


__all__ = ["valid_programs", "tiles", "Tile", "register_layouts", "shared_layouts", "int_exprs",
           "bool_exprs", "pointer_dtypes", "source_locs", "float_consts"]
