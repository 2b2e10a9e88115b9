"""Hypothesis strategies that write the Python source of random `@tv.kernel` programs,
for the frontend fuzzer (tests/vm/test_fuzz_frontend.py).

    from frontend_programs import fuzz_programs

    @given(fuzz_programs())
    def test_something(case): ...   # case.source, case.valid, case.reference(...)

A `FuzzProgram` is one kernel file's text with what checking it needs:

- valid programs (`valid`): a 2-d tile of a [M, N] input, loaded with a mask (`other=0`)
  and put through a chain of steps: arithmetic with constants, casts, reductions that
  broadcast back, a shared-memory round trip, a runtime loop, `tv.dot` on the tensor
  cores, `tv.where`; then stored (masked) to an [M, N] output. The generator builds a
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

import numpy as np
from hypothesis import strategies as st

# Pointer dtypes the inputs and outputs use (numpy has each), and the types a tile may be
# cast to in between, with the largest |integer| each holds exactly (bf16 and int8: 2^7).
POINTER_NUMPY = {"f16": np.float16, "f32": np.float32, "int8": np.int8, "int32": np.int32}
EXACT_BOUND = {"f16": 2**11, "bf16": 2**8, "f32": 2**24, "int8": 127, "int32": 2**24}
INTEGER = ("int8", "int32")
INPUT_BOUND = 8  # inputs are integers in [-8, 8]

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
        """Runtime arguments (x, w, out, M, N, reps): random small integers in x and w,
        a sentinel in out."""
        x = rng.integers(-INPUT_BOUND, INPUT_BOUND + 1, (M, N)).astype(POINTER_NUMPY[self.in_dtype])
        w = rng.integers(-2, 3, (self.cols, self.cols)).astype(np.float16)
        out = np.full((M, N), 99, POINTER_NUMPY[self.out_dtype])
        return [x, w, out, M, N, reps]

    def reference(self, x: np.ndarray, w: np.ndarray, M: int, N: int, reps: int) -> np.ndarray:
        """What `out` must hold: each block's padded tile through the steps (float64,
        exact), stored where it lies inside [M, N]; 99 elsewhere (never written)."""
        out = np.full((M, N), 99.0)
        R, C = self.rows, self.cols
        for m0 in range(0, M, R):
            for n0 in range(0, N, C):
                tile = np.zeros((R, C))
                part = x[m0:m0 + R, n0:n0 + C].astype(np.float64)
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
def _chain(draw, rows: int, cols: int, in_dtype: str):
    """Source lines (indented) and numpy steps of a valid chain on tile `t`; returns
    (lines, steps, final dtype)."""
    lines: list[str] = []
    steps: list = []
    dtype, bound = in_dtype, INPUT_BOUND
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["const", "mul", "cast", "reduce", "shared", "loop",
                                     "dot", "where", "neg", "floordiv", "unrolled", "branch"]))
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
                lines.append(f"t = t + tv.full([{rows}, {cols}], {c}, tv.{dtype})")
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
            lines += [f"acc = tv.zeros([{rows}, {cols}], tv.{dtype})",
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
            lines.append(f"t = tv.where(t > {c}, t, tv.zeros([{rows}, {cols}], tv.{dtype}))")
            steps.append(lambda t, e, c=c: np.where(t > c, t, 0))
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


@st.composite
def fuzz_programs(draw, malformed: bool | None = None) -> FuzzProgram:
    """A random kernel file (valid, or malformed with probability 1/3 unless
    `malformed` says which)."""
    rows, cols = draw(SHAPES)
    if draw(st.booleans()):  # shapes the tensor cores take, so `dot` can appear
        rows, cols = draw(st.sampled_from([16, 32])), draw(st.sampled_from([16, 32]))
    in_dtype = draw(st.sampled_from(sorted(POINTER_NUMPY)))
    num_warps = draw(st.sampled_from([1, 2, 4]))
    lines, steps, dtype = draw(_chain(rows, cols, in_dtype))
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
        f"def fuzz(x: tv.ptr(tv.{in_dtype}, const=True), w: tv.ptr(tv.f16, const=True),",
        f"         out: tv.ptr(tv.{out_dtype}), M: tv.int32, N: tv.int32, reps: tv.int32):",
        f"    tv.grid(tv.cdiv(M, {rows}), tv.cdiv(N, {cols}))",
        "    gx = tv.global_view(x, [M, N])",
        f"    gw = tv.global_view(w, [{cols}, {cols}])",
        "    go = tv.global_view(out, [M, N])",
        f"    m0 = tv.block_idx(0) * {rows}",
        f"    n0 = tv.block_idx(1) * {cols}",
    ]
    if draw(st.booleans()):
        header.append(f"    t = tv.load_global(gx, [m0, n0], [{rows}, {cols}], other=0)")
    else:  # the same tile through shared memory: the copy fills outside [M, N] with 0
        header += [f"    x_s = tv.alloc_shared(tv.{in_dtype}, [{rows}, {cols}])",
                   "    tv.copy_async(x_s, gx, [m0, n0])",
                   "    tv.copy_async_commit()",
                   "    tv.copy_async_wait(0)",
                   "    tv.sync()",
                   f"    t = tv.load_shared(x_s, [0, 0], [{rows}, {cols}])",
                   "    tv.free_shared(x_s)"]
    body = header + ["    " + line for line in lines]
    first_bad = len(body) + 1
    body += ["    " + line for line in bad]
    bad_lines = tuple(range(first_bad, first_bad + len(bad)))
    body.append("    tv.store_global(go, t, [m0, n0])")
    return FuzzProgram("\n".join(body) + "\n", rows, cols, in_dtype, out_dtype, steps,
                       bad_lines, description)
