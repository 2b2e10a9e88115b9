"""Row softmax: `out[i, :] = exp(x[i, :] - max_i) / sum(exp(x[i, :] - max_i))`.

Each block handles `rows` consecutive rows of an [M, N] matrix and the whole width of
each row in one tile of `block_n >= N` columns (`example_inputs` picks the next power
of two of N). It shows

- a 2-d tile loaded with `other=-inf`: the columns past N then add nothing to the max
  and `exp(-inf) = 0` to the sum, so a ragged N needs no other masking;
- `cast`: f16 data is computed in f32 and rounded back (to nearest even) for the
  store (loads and stores keep their tensor's dtype);
- reductions that keep the reduced dimension (`keepdim=True`), so the result
  broadcasts back over the row;
- one kernel body for two element types: a pointer's dtype is part of the signature,
  so `make_softmax(dtype)` builds one kernel per type (`softmax_f32`, `softmax_f16`).

Rows past M (in the last block of a ragged M) are all -inf: their max is -inf and their
values NaN, but they lie outside the tensor, so they are never stored.

    vmc run examples/softmax.py:softmax_f16 --interpret --set M=19 --set N=100
"""

import numpy as np

from tilevm.dtypes import DataType
from tilevm.vm import lang as tv


def make_softmax(dtype: DataType) -> tv.Kernel:
    """The softmax kernel for [M, N] matrices of `dtype` (f32, f16 or bf16)."""

    @tv.kernel(num_warps=4)
    def softmax(x: tv.ptr(dtype, const=True), out: tv.ptr(dtype), M: tv.int32, N: tv.int32,
                *, rows: int = 4, block_n: int = 128):
        tv.grid(tv.cdiv(M, rows))
        gx = tv.global_view(x, [M, N])
        go = tv.global_view(out, [M, N])
        row = tv.block_idx(0) * rows
        t = tv.load_global(gx, [row, 0], [rows, block_n], other=float("-inf"))
        t = tv.cast(t, tv.f32)
        t = t - tv.max(t, 1, keepdim=True)
        e = tv.exp(t)
        p = e / tv.sum(e, 1, keepdim=True)
        tv.store_global(go, tv.cast(p, dtype), [row, 0])

    softmax.name = f"softmax_{dtype}"
    return softmax


softmax_f32 = make_softmax(tv.f32)
softmax_f16 = make_softmax(tv.f16)


def example_inputs(rng: np.random.Generator, kernel: tv.Kernel = softmax_f32,
                   M: int | None = None, N: int | None = None, **constants):
    """A random [M, N] problem (ragged M and N unless given) for `kernel`."""
    M = int(rng.integers(5, 24)) if M is None else M
    N = int(rng.integers(20, 200)) if N is None else N
    constants.setdefault("block_n", max(16, 1 << (N - 1).bit_length()))
    np_type = np.float16 if kernel.signature.params[0].type.dtype == tv.f16 else np.float32
    x = (rng.standard_normal((M, N)) * 3).astype(np_type)
    out = np.full((M, N), np.nan, dtype=np_type)
    return [x, out, M, N], constants


def reference(x, out, M, N, **constants) -> dict[int, np.ndarray]:
    """Output argument index -> expected values (float64)."""
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {1: e / e.sum(axis=1, keepdims=True)}
