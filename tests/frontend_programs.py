"""Hypothesis strategies that write the Python source of random `@tv.kernel` programs,
for the frontend fuzzer (tests/vm/test_fuzz_frontend.py).

    from frontend_programs import fuzz_programs

    @given(fuzz_programs())
    def test_something(case): ...   # case.source, case.valid, case.reference(...)

A `FuzzProgram` is one kernel file's text with what checking it needs:

- valid programs (`valid`): a 2-d tile of a [M, N] input (f16, bf16, f32, int8, int32,
  or int4/uint4/int2/uint2 codes packed in uint8 bytes, `view`ed as codes and cast),
  loaded with a mask (`other=0`), through shared memory, or summed from a two-stage
  `copy_async` ring, and put through a chain of steps: arithmetic with constants, casts,
  reductions that broadcast back, a shared-memory round trip, a runtime loop, `tv.dot`
  on the tensor cores, `tv.where`, layout conversions (explicit register layouts that
  cover the tile with the block's threads, on loads, `full`/`zeros`, casts and
  `annotate_layout`), round-trip `view`s and an f32 tile's exponent read through its
  int32 bits; then stored (masked) to an [M, N] output. The generator builds a
  numpy reference alongside the source, step by step on the padded tile of each block.
  Values stay small integers whose every intermediate each type holds exactly (a bound
  on |value| is tracked through the chain), so interpreter and numpy must agree exactly.
- malformed programs (`bad_lines`): a valid program with one wrong statement inserted
  before its store (a shape mismatch, a constant the type cannot hold, a store through
  a const pointer, a bad dimension, layout or view, a tile too large, ...). They must
  raise a `VMError` whose location is one of `bad_lines` of the generated file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
from hypothesis import strategies as st

from tilevm import dtypes

# Pointer dtypes the inputs and outputs use (numpy has each), and the types a tile may be
# cast to in between, with the largest |integer| each holds exactly (bf16 and int8: 2^7).
POINTER_NUMPY = {"f16": np.float16, "f32": np.float32, "int8": np.int8, "int32": np.int32}
EXACT_BOUND = {"f16": 2**11, "bf16": 2**8, "f32": 2**24, "int8": 127, "int32": 2**24}
INTEGER = ("int8", "int32")
INPUT_BOUND = 8  # inputs are integers in [-8, 8]
# Input pointers besides POINTER_NUMPY: bf16 (its arguments are uint16 codes) and b-bit
# integer codes packed into uint8 bytes (read as bytes, `view`ed as codes and cast, the
# way examples/quantized_matmul.py reads packed weights), with the values each holds.
PACKED_RANGE = {"int4": (-8, 7), "uint4": (0, 15), "int2": (-2, 1), "uint2": (0, 3)}
INPUT_DTYPES = sorted(POINTER_NUMPY) + ["bf16"] + sorted(PACKED_RANGE)
# Round-trip views of a tile of one type as another (target elements per source element).
VIEWS = {"int32": [("int8", 4), ("f16", 2), ("f32", 1)], "f32": [("int32", 1), ("int8", 4)],
         "f16": [("int8", 2), ("bf16", 1)], "bf16": [("f16", 1), ("int8", 2)],
         "int8": [("int32", Fraction(1, 4)), ("f16", Fraction(1, 2))]}


@dataclass(frozen=True)
class TileLayout:
    """A register layout covering a [rows, cols] tile with every thread of the block,
    each thread holding `d` consecutive elements of a row (`a` times):
    `local(a, 1).spatial(t0, t1).local(1, d)` (`outer`) or `spatial(t0, t1).local(a, d)`."""

    a: int
    t0: int
    t1: int
    d: int
    outer: bool

    def text(self, widen: Fraction | int = 1) -> str:
        """The layout, or that of its `view` with `widen` times as many elements a row
        (the same bits per thread in elements `widen` times narrower)."""
        d = Fraction(self.d) * widen
        assert d.denominator == 1, f"{self} cannot be viewed {widen} times wider"
        if self.outer:
            return f"local({self.a}, 1).spatial({self.t0}, {self.t1}).local(1, {int(d)})"
        return f"spatial({self.t0}, {self.t1}).local({self.a}, {int(d)})"


def tile_layouts(rows: int, cols: int, threads: int) -> list[TileLayout]:
    """Every `TileLayout` of a [rows, cols] tile over `threads` threads."""
    found = []
    for t0 in (t for t in range(1, threads + 1) if threads % t == 0):
        t1 = threads // t0
        if rows % t0 == 0 and cols % t1 == 0:
            found += [TileLayout(rows // t0, t0, t1, cols // t1, outer)
                      for outer in (False, True)]
    return found

@dataclass
class FuzzProgram:
    """One generated kernel file and how to check it."""

    source: str
    rows: int  # the tile's shape [rows, cols]
    cols: int
    in_dtype: str
    out_dtype: str
    steps: list[Callable[[np.ndarray, dict], np.ndarray]] = field(repr=False)
    bad_lines: tuple[int, ...] = ()  # a malformed program's error must name one of these
    description: str = ""

    @property
    def valid(self) -> bool:
        return not self.bad_lines

    def arguments(self, rng: np.random.Generator, M: int, N: int, reps: int) -> list:
        """Runtime arguments (x, w, out, M, N, reps): random small integers in x and w
        (x as the input pointer holds them: bf16 codes, or b-bit codes packed into rows
        of `cdiv(N * b, 8)` bytes), a sentinel in out."""
        low, high = PACKED_RANGE.get(self.in_dtype, (-INPUT_BOUND, INPUT_BOUND))
        values = rng.integers(low, high + 1, (M, N))
        if self.in_dtype in PACKED_RANGE:
            bits = dtypes.parse(self.in_dtype).bits
            per_byte = 8 // bits
            padded = np.zeros((M, -(-N // per_byte) * per_byte), np.int64)
            padded[:, :N] = values  # a row's last byte is padded with zero codes
            codes = dtypes.encode(padded, self.in_dtype).reshape(-1)
            x = dtypes.pack(codes, bits).reshape(M, -1)
        elif self.in_dtype == "bf16":
            x = dtypes.encode(values, "bf16")
        else:
            x = values.astype(POINTER_NUMPY[self.in_dtype])
        w = rng.integers(-2, 3, (self.cols, self.cols)).astype(np.float16)
        out = np.full((M, N), 99, POINTER_NUMPY[self.out_dtype])
        return [x, w, out, M, N, reps]

    def input_values(self, x: np.ndarray, N: int) -> np.ndarray:
        """The values the input argument `x` holds, [M, N] float64."""
        if self.in_dtype in PACKED_RANGE:
            bits = dtypes.parse(self.in_dtype).bits
            codes = dtypes.unpack(x.reshape(-1), bits, x.size * 8 // bits)
            return dtypes.decode(codes, self.in_dtype).reshape(x.shape[0], -1)[:, :N]
        if self.in_dtype == "bf16":
            return dtypes.decode(x, "bf16")
        return x.astype(np.float64)

    def reference(self, x: np.ndarray, w: np.ndarray, M: int, N: int, reps: int) -> np.ndarray:
        """What `out` must hold: each block's padded tile through the steps (float64,
        exact), stored where it lies inside [M, N]; 99 elsewhere (never written)."""
        x = self.input_values(x, N)
        out = np.full((M, N), 99.0)
        R, C = self.rows, self.cols
        for m0 in range(0, M, R):
            for n0 in range(0, N, C):
                tile = np.zeros((R, C))
                part = x[m0:m0 + R, n0:n0 + C]
                tile[:part.shape[0], :part.shape[1]] = part
                env = {"w": w.astype(np.float64), "reps": reps, "M": M}
                for step in self.steps:
                    tile = step(tile, env)
                out[m0:m0 + R, n0:n0 + C] = tile[:part.shape[0], :part.shape[1]]
        return out


def _saturate(values: np.ndarray, dtype: str) -> np.ndarray:
    """A cast's value in `dtype` for integer-valued inputs: integers clamp to the range
    (the interpreter's integer casts saturate); floats hold them exactly (bounded)."""
    if dtype == "int8":
        return np.clip(values, -128, 127)
    return values


@st.composite
def _chain(draw, rows: int, cols: int, in_dtype: str, bound: int,
           layouts: list[TileLayout]):
    """Source lines (indented) and numpy steps of a valid chain on tile `t` (of
    `in_dtype`, |values| <= `bound`); `layouts` are those that may be given explicitly.
    Returns (lines, steps, final dtype)."""
    lines: list[str] = []
    steps: list = []
    dtype = in_dtype

    def layout_arg() -> str:  # an explicit layout for a new tile, or none
        if not layouts or draw(st.booleans()):
            return ""
        return f", layout='{draw(st.sampled_from(layouts)).text()}'"

    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["const", "mul", "cast", "reduce", "shared", "loop",
                                     "dot", "where", "neg", "floordiv", "unrolled", "branch",
                                     "relayout", "view"]))
        if kind == "const":
            c = draw(st.integers(-8, 8))
            op = draw(st.sampled_from(["+", "-", "maximum", "minimum", "full"]))
            if bound + abs(c) > EXACT_BOUND[dtype]:
                continue
            if op in "+-":
                lines.append(f"t = t {op} {c}")
                steps.append(lambda t, e, c=c, op=op: t + c if op == "+" else t - c)
                bound += abs(c)
            elif op == "full":
                lines.append(f"t = t + tv.full([{rows}, {cols}], {c}, tv.{dtype}{layout_arg()})")
                steps.append(lambda t, e, c=c: t + c)
                bound += abs(c)
            else:
                lines.append(f"t = tv.{op}(t, {c})")
                fn = np.maximum if op == "maximum" else np.minimum
                steps.append(lambda t, e, c=c, fn=fn: fn(t, c))
                bound = max(bound, abs(c))
        elif kind == "mul":
            c = draw(st.sampled_from([-2, -1, 2, 3]))
            if bound * abs(c) > EXACT_BOUND[dtype]:
                continue
            lines.append(f"t = t * {c}")
            steps.append(lambda t, e, c=c: t * c)
            bound *= abs(c)
        elif kind == "neg":
            if bound > EXACT_BOUND[dtype]:  # -(-128) does not fit int8: it wraps
                continue
            negate = draw(st.booleans())
            lines.append("t = -t" if negate else "t = tv.abs(t)")
            steps.append(lambda t, e, negate=negate: -t if negate else np.abs(t))
        elif kind == "floordiv":
            if dtype not in INTEGER:
                continue
            c = draw(st.sampled_from([-3, -2, 2, 3, 5]))
            op = draw(st.sampled_from(["//", "%"]))
            lines.append(f"t = t {op} {c}")
            steps.append(lambda t, e, c=c, op=op: np.floor_divide(t, c) if op == "//"
                         else np.mod(t, c))
            bound = bound if op == "//" else max(abs(c), 1)
        elif kind == "cast":
            target = draw(st.sampled_from(sorted(EXACT_BOUND)))
            if bound > EXACT_BOUND[target] and target != "int8":
                continue
            form = draw(st.booleans())
            lines.append(f"t = t.to(tv.{target})" if form else f"t = tv.cast(t, tv.{target})")
            steps.append(lambda t, e, target=target: _saturate(t, target))
            # (an int8 cast saturates to [-128, 127]: |value| up to 128)
            dtype, bound = target, 128 if target == "int8" else min(bound, EXACT_BOUND[target])
        elif kind == "reduce":
            op = draw(st.sampled_from(["sum", "max", "min"]))
            dim = draw(st.integers(0, 1))
            width = (rows, cols)[dim]
            grows = op == "sum"
            new_bound = bound * (width + 1) if grows else 2 * bound
            if new_bound > EXACT_BOUND[dtype]:
                continue
            form = draw(st.booleans())
            call = (f"t.{op}({dim}, keepdim=True)" if form
                    else f"tv.{op}(t, {dim}, keepdim=True)" if op == "sum"
                    else f"tv.{op}(t, dim={dim}, keepdim=True)")
            lines.append(f"t = t - {call}")
            fn = {"sum": np.sum, "max": np.max, "min": np.min}[op]
            steps.append(lambda t, e, fn=fn, dim=dim: t - fn(t, axis=dim, keepdims=True))
            bound = new_bound
        elif kind == "shared":
            lines += [f"s = tv.alloc_shared(tv.{dtype}, [{rows}, {cols}])",
                      "tv.store_shared(s, t)",
                      "tv.sync()",
                      f"t = tv.load_shared(s, [0, 0], [{rows}, {cols}])",
                      "tv.free_shared(s)"]
            steps.append(lambda t, e: t)
        elif kind == "loop":
            if bound * 4 > EXACT_BOUND[dtype]:
                continue
            lines += [f"acc = tv.zeros([{rows}, {cols}], tv.{dtype}{layout_arg()})",
                      "for i in tv.range(0, reps):",
                      "    acc = acc + t",
                      "t = acc + 1"]
            steps.append(lambda t, e: t * e["reps"] + 1)
            bound = bound * 3 + 1  # reps <= 3
        elif kind == "dot":
            if rows % 16 or cols % 16 or bound * 2 * cols > 2**24 or bound > 2**11:
                continue
            lines += [f"wt = tv.load_global(gw, [0, 0], [{cols}, {cols}])",
                      f"t = tv.dot(t.to(tv.f16), wt, tv.zeros([{rows}, {cols}], tv.f32))"]
            steps.append(lambda t, e: t @ e["w"])
            dtype, bound = "f32", bound * 2 * cols
        elif kind == "unrolled":
            trips = draw(st.integers(1, 3))
            if bound + trips > EXACT_BOUND[dtype]:
                continue
            lines += [f"for i in range({trips}):", "    t = t + 1"]
            steps.append(lambda t, e, trips=trips: t + trips)
            bound += trips
        elif kind == "branch":
            c = draw(st.integers(0, 8))
            if bound + 1 > EXACT_BOUND[dtype]:
                continue
            lines += [f"if M > {c}:", "    t = t + 1", "else:", "    t = t - 1"]
            steps.append(lambda t, e, c=c: t + 1 if e["M"] > c else t - 1)
            bound += 1
        elif kind == "where":
            c = draw(st.integers(-4, 4))
            zeros = f"tv.zeros([{rows}, {cols}], tv.{dtype}{layout_arg()})"
            lines.append(f"t = tv.where(t > {c}, t, {zeros})")
            steps.append(lambda t, e, c=c: np.where(t > c, t, 0))
        elif kind == "relayout" and layouts:  # a layout conversion (a cast to the same type)
            target = draw(st.sampled_from(layouts))
            if draw(st.booleans()):
                lines.append(f"t = tv.cast(t, tv.{dtype}, layout='{target.text()}')")
            else:  # a hint on a tile of no layout yet (one contradicting a layout is an error)
                lines += [f"z = tv.zeros([{rows}, {cols}], tv.{dtype})",
                          f"z = tv.annotate_layout(z, '{target.text()}')",
                          "t = t + z"]
            steps.append(lambda t, e: t)
        elif kind == "view" and layouts:
            # A view needs its source's layout: give `t` one, then reinterpret its bits.
            layout = draw(st.sampled_from(layouts))
            lines.append(f"t = tv.cast(t, tv.{dtype}, layout='{layout.text()}')")
            if dtype == "f32" and draw(st.booleans()):
                # The f32 bits as int32: the biased exponent less 127 (-127 for 0), the
                # same as numpy's view of the float32 values.
                lines += [f"t = tv.view(t, tv.int32, [{rows}, {cols}], '{layout.text()}')",
                          "t = ((t >> 23) & 255) - 127"]
                steps.append(lambda t, e: (
                    ((t.astype(np.float32).view(np.int32) >> 23) & 255) - 127).astype(np.float64))
                dtype, bound = "int32", 127
                continue
            target, widen = draw(st.sampled_from(VIEWS[dtype]))
            if (Fraction(layout.d) * widen).denominator != 1:
                continue
            wide = int(cols * widen)
            lines += [f"v = tv.view(t, tv.{target}, [{rows}, {wide}], '{layout.text(widen)}')",
                      f"t = v.view(tv.{dtype}, [{rows}, {cols}], '{layout.text()}')"]
            steps.append(lambda t, e: t)
    return lines, steps, dtype


def _malformed_statements(rows: int, cols: int, dtype: str) -> list[tuple[str, list[str]]]:
    """(description, lines) of statements that are wrong in a program whose tile `t` is
    [rows, cols] of `dtype`; each must be a VMError at one of its lines."""
    bad = [
        ("int constant out of range", [f"bad = tv.full([{rows}, {cols}], 300, tv.int8)"]),
        ("float constant for an int type", [f"bad = tv.full([{rows}, {cols}], 0.5, tv.int32)"]),
        ("NaN for an int type", [f"bad = tv.full([{rows}, {cols}], float('nan'), tv.int32)"]),
        ("store through a const pointer", ["tv.store_global(gx, t, [0, 0])"]),
        ("reduce over a missing dimension", ["bad = t.sum(2)"]),
        ("negative reduction dimension out of range", ["bad = tv.max(t, dim=-3)"]),
        ("a tile too large", ["bad = tv.zeros([2**20, 2**20], tv.f32)"]),
        ("a layout with the wrong thread count",
         [f"bad = tv.load_global(gx, [0, 0], [{rows}, {cols}], layout='spatial(3, 5)')"]),
        ("a layout that is not text of one", [f"bad = tv.zeros([{rows}, {cols}], tv.f32, "
                                              "layout='nonsense(')"]),
        ("dot of mismatched tiles", [f"bad = tv.dot(t, t, tv.zeros([{rows}, {cols + 1}]))"]),
        ("view changing the bits", [f"bad = t.view(tv.int8, [{rows}, {cols}], 'spatial(1, 1)')"]),
        ("a load past the shared tile",
         [f"s = tv.alloc_shared(tv.f32, [{rows}, {cols}])",
          f"bad = tv.load_shared(s, [{rows}, 0], [{rows}, {cols}])", "tv.free_shared(s)"]),
        ("a shared tensor too large", ["s = tv.alloc_shared(tv.f32, [1024, 1024])",
                                       "tv.free_shared(s)"]),
        ("an unknown dtype", ["bad = tv.zeros([4], 'f13')"]),
        ("a negative shape", ["bad = tv.zeros([-4, 2], tv.f32)"]),
        ("a zero shape", ["bad = tv.zeros([0], tv.f32)"]),
        ("a runtime value as a bool", ["bad = 1 if bool(M > 1) else 2"]),
        ("cast to a non-type", ["bad = tv.cast(t, 17)"]),
        ("an exponent on a float source", ["bad = tv.cast(t.to(tv.f32), tv.f16, exponent=2)"]),
        ("a second grid", ["tv.grid(1)"]),
        ("offset count mismatch", [f"bad = tv.load_global(gx, [0], [{rows}, {cols}])"]),
    ]
    if cols > 1:
        bad.append(("shape mismatch", [f"bad = t + tv.zeros([{rows}, {cols + 1}], tv.{dtype})"]))
    if dtype not in INTEGER:
        bad.append(("bitwise on a float", ["bad = t & 1"]))
    return bad


SHAPES = st.tuples(st.sampled_from([1, 2, 4, 8, 16, 32]), st.sampled_from([1, 2, 4, 8, 16, 32, 64]))


def _input_lines(draw, rows: int, cols: int, in_dtype: str, layout: TileLayout | None,
                 steps: list, ring: bool) -> list[str]:
    """The lines that read the block's tile of `x` into `t` (of the pointer's type),
    through registers, shared memory or (if `ring`) a two-stage `copy_async` ring;
    appends the numpy step of what they compute."""
    R, C = rows, cols
    layout_arg = f", layout='{layout.text()}'" if layout else ""
    how = draw(st.sampled_from(["load", "copy", "ring"] if ring else ["load", "copy"]))
    if how == "load":
        return [f"t = tv.load_global(gx, [m0, n0], [{R}, {C}]{layout_arg}, other=0)"]
    if how == "copy":  # the same tile through shared memory: the copy fills outside [M, N] with 0
        return [f"x_s = tv.alloc_shared(tv.{in_dtype}, [{R}, {C}])",
                "tv.copy_async(x_s, gx, [m0, n0])",
                "tv.copy_async_commit()",
                "tv.copy_async_wait(0)",
                "tv.sync()",
                f"t = tv.load_shared(x_s, [0, 0], [{R}, {C}]{layout_arg})",
                "tv.free_shared(x_s)"]
    # A ring of two stages, `reps` trips of two: while one stage is read, the copy into
    # the other is in flight (commit, then wait for all but the newest group); the tile
    # is summed 2 * reps times.
    steps.append(lambda t, e: t * 2 * e["reps"])
    return [f"x_s = [tv.alloc_shared(tv.{in_dtype}, [{R}, {C}]) for _ in range(2)]",
            "tv.copy_async(x_s[0], gx, [m0, n0])",
            "tv.copy_async_commit()",
            f"t = tv.zeros([{R}, {C}], tv.{in_dtype}{layout_arg})",
            "for i in tv.range(0, reps):",
            "    for s in range(2):",
            "        tv.copy_async(x_s[1 - s], gx, [m0, n0])",
            "        tv.copy_async_commit()",
            "        tv.copy_async_wait(1)",
            "        tv.sync()",
            f"        t = t + tv.load_shared(x_s[s], [0, 0], [{R}, {C}])",
            "        tv.sync()",
            "tv.copy_async_wait(0)",
            "tv.free_shared(x_s[0])",
            "tv.free_shared(x_s[1])"]


@st.composite
def fuzz_programs(draw, malformed: bool | None = None) -> FuzzProgram:
    """A random kernel file (valid, or malformed with probability 1/3 unless
    `malformed` says which)."""
    rows, cols = draw(SHAPES)
    if draw(st.booleans()):  # shapes the tensor cores take, so `dot` can appear
        rows, cols = draw(st.sampled_from([16, 32])), draw(st.sampled_from([16, 32]))
    in_dtype = draw(st.sampled_from(INPUT_DTYPES))
    num_warps = draw(st.sampled_from([1, 2, 4]))
    layouts = tile_layouts(rows, cols, 32 * num_warps)
    steps: list = []
    if in_dtype in PACKED_RANGE:
        # Codes of b bits, `8 / b` a byte: each thread's run of codes must be whole bytes.
        bits = dtypes.parse(in_dtype).bits
        fits = [lay for lay in layouts if lay.d * bits % 8 == 0]
        if not fits:
            in_dtype = "int8"
    if in_dtype in PACKED_RANGE:
        layout = draw(st.sampled_from(fits))
        compute = draw(st.sampled_from(["int8", "int32", "f16", "f32", "bf16"]))
        row_bytes = cols * bits // 8
        input_lines = _input_lines(draw, rows, row_bytes, "uint8",
                                   TileLayout(layout.a, layout.t0, layout.t1,
                                              layout.d * bits // 8, layout.outer),
                                   steps, ring=False)
        input_lines += [f"t = tv.view(t, tv.{in_dtype}, [{rows}, {cols}], '{layout.text()}')",
                        f"t = tv.cast(t, tv.{compute})"]
        gx = f"tv.global_view(x, [M, tv.cdiv(N * {bits}, 8)])"
        n0x = f"tv.block_idx(1) * {row_bytes}"
        pointer, bound = "uint8", max(abs(v) for v in PACKED_RANGE[in_dtype])
    else:
        layout = draw(st.sampled_from(layouts)) if layouts and draw(st.booleans()) else None
        input_lines = _input_lines(draw, rows, cols, in_dtype, layout, steps, ring=True)
        gx, n0x = "tv.global_view(x, [M, N])", "n0"
        compute, pointer, bound = in_dtype, in_dtype, INPUT_BOUND
    if steps:  # the ring sums the tile 2 * reps <= 6 times
        bound *= 6
    lines, chain_steps, dtype = draw(_chain(rows, cols, compute, bound, layouts))
    steps += chain_steps
    out_dtype = dtype if dtype in POINTER_NUMPY else "f32"
    if dtype != out_dtype:
        lines.append(f"t = t.to(tv.{out_dtype})")
        steps.append(lambda t, e: t)
    if malformed is None:
        malformed = draw(st.integers(0, 2)) == 0
    description, bad = "", []
    if malformed:
        description, bad = draw(st.sampled_from(_malformed_statements(rows, cols, dtype)))
    header = [
        "import tilevm as tv",
        "",
        "",
        f"@tv.kernel(num_warps={num_warps})",
        f"def fuzz(x: tv.ptr(tv.{pointer}, const=True), w: tv.ptr(tv.f16, const=True),",
        f"         out: tv.ptr(tv.{out_dtype}), M: tv.int32, N: tv.int32, reps: tv.int32):",
        f"    tv.grid(tv.cdiv(M, {rows}), tv.cdiv(N, {cols}))",
        f"    gx = {gx}",
        f"    gw = tv.global_view(w, [{cols}, {cols}])",
        "    go = tv.global_view(out, [M, N])",
        f"    m0 = tv.block_idx(0) * {rows}",
        f"    n0 = tv.block_idx(1) * {cols}",
    ]
    input_lines = [line.replace("[m0, n0]", f"[m0, {n0x}]") for line in input_lines]
    body = header + ["    " + line for line in input_lines + lines]
    first_bad = len(body) + 1
    body += ["    " + line for line in bad]
    bad_lines = tuple(range(first_bad, first_bad + len(bad)))
    body.append("    tv.store_global(go, t, [m0, n0])")
    return FuzzProgram("\n".join(body) + "\n", rows, cols, in_dtype, out_dtype, steps,
                       bad_lines, description)
