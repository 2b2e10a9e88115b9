"""The f32 transcendental functions (`tv.exp`, `exp2`, `log`, `log2`, `sqrt`, `rsqrt`)
compiled for the GPU against numpy, over their whole range: tiny and huge arguments,
results that overflow or underflow, zeros, infinities and NaN. The lowering uses
approximate PTX instructions (backend/llvm/arith.py): finite results agree with numpy
within a few units in the last place (an absolute 2^-21 for log and log2, whose
relative error near 1 is not bounded), results below the smallest normal number within
that number (flushed to zero, or approximated), and every inf, NaN and zero is
numpy's."""

from __future__ import annotations

import numpy as np
import pytest

from tilevm.vm import lang as tv
from tilevm.vm.interpreter import run

OPS = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
       "rsqrt": lambda x: 1 / np.sqrt(x)}
BLOCK = 128


@tv.kernel(num_warps=4)
def unary(x: tv.ptr(tv.f32, const=True), y: tv.ptr(tv.f32), n: tv.int32, *, op: str):
    tv.grid(tv.cdiv(n, BLOCK))
    t = tv.block_idx(0)
    v = tv.load_global(tv.global_view(x, [n]), [t * BLOCK], [BLOCK])
    r = {"exp": tv.exp, "exp2": tv.exp2, "log": tv.log, "log2": tv.log2, "sqrt": tv.sqrt,
         "rsqrt": tv.rsqrt}[op](v)
    tv.store_global(tv.global_view(y, [n]), r, [t * BLOCK])


def arguments(op: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-45, 1e-38, 3e38]
    if op in ("exp", "exp2"):
        wide = rng.uniform(-160, 160, 4000)  # past both ends: overflow and underflow
        edges = [88.0, 88.7, 89.0, 100.0, 1000.0, -87.0, -103.0, -104.0, 127.9, 128.0,
                 -126.0, -149.0, -150.0]
    else:
        wide = np.exp2(rng.uniform(-149, 128, 4000)) * rng.choice([1, -1], 4000, p=[.9, .1])
        edges = [1 + 2.0 ** -23, 1 - 2.0 ** -24, 2.0 ** -126, 2.0 ** -149, 0.5, 2.0]
    return np.concatenate([special, edges, wide]).astype(np.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("op", OPS)
def test_gpu_matches_numpy_over_the_whole_range(op):
    from tilevm.backend.cuda.device_array import DeviceArray
    from tilevm.backend.launch import compiled_kernel

    x = arguments(op)
    with np.errstate(all="ignore"):
        want = OPS[op](x.astype(np.float64)).astype(np.float32)
    y = DeviceArray.zeros(x.size, "f32")
    compiled_kernel(unary.specialize(op=op))(DeviceArray.from_numpy(x), y, x.size)
    got = y.to_numpy()
    tiny = np.finfo(np.float32).tiny
    bad = (np.isnan(got) != np.isnan(want)) | (np.isinf(got) != np.isinf(want))
    bad |= np.isinf(want) & (got != want)
    # below the smallest normal the approximations may flush or lose precision
    absolute = tiny + (2.0 ** -21 if op in ("log", "log2") else 0.0)
    error = np.abs(got.astype(np.float64) - want)
    bad |= np.isfinite(want) & (error > 2.0 ** -20 * np.abs(want.astype(np.float64)) + absolute)
    assert not bad.any(), [(float(a), float(g), float(w))
                           for a, g, w in zip(x[bad][:8], got[bad][:8], want[bad][:8])]


@pytest.mark.parametrize("op", OPS)
def test_interpreter_rounds_numpys_float64_result(op):
    x = arguments(op)
    y = np.zeros_like(x)
    run(unary.specialize(op=op), [x, y, x.size])
    with np.errstate(all="ignore"):
        want = OPS[op](x.astype(np.float64)).astype(np.float32)  # rounded once
    np.testing.assert_array_equal(y, want)
