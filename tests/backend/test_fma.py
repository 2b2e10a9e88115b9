"""`tv.fma(a, b, c)`: `a * b + c` rounded once. The interpreter's rule (`interp_values.
fma_round_to_odd`, then one rounding to the format) against exact rational arithmetic
(fractions) for f32, f16 and bf16, including a case where two roundings differ; the
verifier's and frontend's errors; the lowering (PTX `fma.rn`); and, marked `gpu`, the
GPU against the interpreter, bit for bit."""

# No `from __future__ import annotations`: the kernel factory's annotations use `dtype`.

import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from kernel_harness import run_both

from tilevm.backend.pipeline import compile_program
from tilevm.dtypes import decode, encode, parse
from tilevm.ir.builder import Builder
from tilevm.ir.errors import VMError
from tilevm.ir.verifier import verify
from tilevm.layouts import spatial
from tilevm.vm import lang as tv
from tilevm.vm.interp_values import elementwise

F32, F16, BF16 = parse("f32"), parse("f16"), parse("bf16")


def fma_kernel(dtype):
    @tv.kernel(num_warps=1)
    def fma_tiles(a: tv.ptr(dtype, const=True), b: tv.ptr(dtype, const=True),
                  c: tv.ptr(dtype, const=True), y: tv.ptr(dtype), n: tv.int32):
        views = [tv.global_view(p, [n]) for p in (a, b, c, y)]
        layout = spatial(32).local(4)
        x, w, z = (tv.load_global(v, [0], [128], layout=layout) for v in views[:3])
        tv.store_global(views[3], tv.fma(x, w, z), [0])

    fma_tiles.name = f"fma_{dtype.name}"
    return fma_tiles


def _neighbors(value: float, dtype) -> list[float]:
    """Values of `dtype` around `value` (two codes either way of its own rounding)."""
    code = int(encode(np.array([value]), dtype)[0])
    codes = np.array([code + i for i in range(-2, 3)]) & ((1 << dtype.bits) - 1)
    return [float(v) for v in decode(codes, dtype) if np.isfinite(v)]


def exact_fma(a: float, b: float, c: float, dtype) -> float:
    """The exact a * b + c rounded to nearest (ties to the even code) in `dtype`: the
    nearest of the format's values around it, compared as fractions."""
    x = Fraction(a) * Fraction(b) + Fraction(c)
    candidates = _neighbors(float(x), dtype)
    best = min(abs(Fraction(v) - x) for v in candidates)
    nearest = [v for v in candidates if abs(Fraction(v) - x) == best]
    if len(nearest) == 1:
        return nearest[0]
    return next(v for v in nearest if int(encode(np.array([v]), dtype)[0]) % 2 == 0)


def interp_fma(a: float, b: float, c: float, dtype) -> float:
    args = [(np.array([v], np.float64), dtype) for v in (a, b, c)]
    return float(elementwise("fma", args, dtype)[0])


# a = 2^-12 (1 + 2^-23), b = 2^-12 (1 - 2^-23), c = 1 + 2^-23: a * b + c = 1 + 3 * 2^-24
# - 2^-70, just below the midpoint of two f32 values. float64 rounds it onto the midpoint
# and a second rounding then goes up to the even 1 + 2^-22; the fma is 1 + 2^-23.
HARD = (2.0 ** -12 * (1 + 2.0 ** -23), 2.0 ** -12 * (1 - 2.0 ** -23), 1 + 2.0 ** -23)


def test_one_rounding_where_two_differ():
    assert interp_fma(*HARD, F32) == 1 + 2.0 ** -23 == exact_fma(*HARD, F32)
    product = float(np.float32(HARD[0] * HARD[1]))  # a * b + c with two roundings
    assert float(np.float32(product + HARD[2])) == 1 + 2.0 ** -22


def _values(dtype):
    """Finite values of `dtype`, from its codes (every exponent, subnormals too)."""
    return st.integers(0, (1 << dtype.bits) - 1).map(
        lambda code: float(decode(np.array([code]), dtype)[0])).filter(np.isfinite)


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_fma_is_the_exact_result_rounded_once(dtype, data):
    a, b, c = (data.draw(_values(dtype)) for _ in range(3))
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    assume(abs(exact) <= Fraction(dtype.max_exact) / 2)  # no overflow to think about
    assert interp_fma(a, b, c, dtype) == exact_fma(a, b, c, dtype)


def test_fma_specials():
    inf, nan = float("inf"), float("nan")
    assert interp_fma(inf, 2.0, 1.0, F32) == inf
    assert np.isnan(interp_fma(inf, 0.0, 1.0, F32))
    assert np.isnan(interp_fma(inf, 1.0, -inf, F32))
    assert np.isnan(interp_fma(nan, 1.0, 1.0, F16))
    assert np.signbit(interp_fma(-0.0, 1.0, -0.0, F32))
    assert not np.signbit(interp_fma(-0.0, 1.0, 0.0, F32))


def test_verifier_takes_floats_and_three_operands():
    for dtype, count, message in (("int32", 3, "takes float operands only"),
                                  ("f32", 2, "takes 3 operand")):
        b = Builder("k", num_warps=1)
        x = b.full(1, dtype, [32], layout=spatial(32))
        b.elementwise("fma", *[x] * count)
        with pytest.raises(VMError, match=message):
            verify(b.build())


def test_frontend_errors_name_the_line():
    @tv.kernel(num_warps=1)
    def int_fma(y: tv.ptr(tv.int32)):
        x = tv.full([32], 1, tv.int32, layout=spatial(32))
        tv.store_global(tv.global_view(y, [32]), tv.fma(x, x, x), [0])  # the fma

    with pytest.raises(VMError, match="tv.fma needs float tiles") as info:
        int_fma.specialize()
    line = next(i for i, text in enumerate(open(__file__), 1) if "# the fma" in text)
    assert f":{line}" in str(info.value)
    with pytest.raises(VMError, match="works on tiles"):
        tv.fma(1.0, 2.0, 3.0)


@pytest.mark.parametrize("dtype, op", [(F32, "fma.rn.f32"), (F16, "fma.rn.f16x2"),
                                       (BF16, "fma.rn.bf16x2")], ids=str)
def test_lowers_to_one_fma(dtype, op):
    ptx = compile_program(fma_kernel(dtype).specialize(), "sm_90").ptx
    ops = re.findall(r"\b(fma|mul|add)\.rn\.\w+", ptx)
    pairs = 2 if dtype.bits == 16 else 1
    assert len(re.findall(rf"\b{re.escape(op)}\b", ptx)) == 4 // pairs
    assert set(ops) == {"fma"}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_gpu_fma_matches_interpreter(dtype):
    rng = np.random.default_rng(dtype.bits)
    values = rng.standard_normal((3, 128)) * np.exp2(rng.integers(-8, 8, (3, 128)))
    a, b, c = (decode(encode(v, dtype), dtype) for v in values)
    if dtype == F32:
        a[:2], b[:2], c[:2] = HARD[0], HARD[1], HARD[2]  # where one rounding matters
    host = {F32: np.float32, F16: np.float16}.get(dtype)
    arrays = [x.astype(host) if host else encode(x, dtype).astype(np.uint16)
              for x in (a, b, c, np.zeros(128))]
    got, want = run_both(fma_kernel(dtype), [*arrays, 128])
    assert np.array_equal(np.asarray(got[3]).view(np.uint16 if dtype.bits == 16 else np.uint32),
                          np.asarray(want[3]).view(np.uint16 if dtype.bits == 16 else np.uint32))
    if dtype == F32:
        assert got[3][0] == np.float32(1 + 2.0 ** -23)
