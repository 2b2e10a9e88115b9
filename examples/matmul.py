"""fp16 matmul: `C[M, N] = A[M, K] @ B[K, N]`, f16 in and out, f32 accumulation.

Each block computes one `bm x bn` tile of C. It shows

- a 2-d grid (`tv.grid(cdiv(M, bm), cdiv(N, bn))`) and `tv.block_idx(0/1)`;
- a runtime k-loop (`for k0 in tv.range(0, K, bk)`) that stays a loop in the IR,
  with a register tile carried from one iteration to the next: rebinding `acc`
  inside the loop updates it in place (an `assign` in the IR);
- `tv.dot(a, b, acc)`: f16 x f16 products summed in f32;
- bounds masking on every edge: tiles that stick out of A or B (ragged M, N or K)
  read zeros, which add nothing to the dot product, and the store skips the
  elements of C outside [M, N]. No shape needs to be a multiple of a tile size.

    vmc run examples/matmul.py --interpret --set M=33 --set N=70 --set K=100
"""

import numpy as np

from tilevm.vm import lang as tv


@tv.kernel(num_warps=4)
def matmul(a: tv.ptr(tv.f16, const=True), b: tv.ptr(tv.f16, const=True), c: tv.ptr(tv.f16),
           M: tv.int32, N: tv.int32, K: tv.int32, *, bm: int = 32, bn: int = 32, bk: int = 32):
    tv.grid(tv.cdiv(M, bm), tv.cdiv(N, bn))
    ga = tv.global_view(a, [M, K])
    gb = tv.global_view(b, [K, N])
    gc = tv.global_view(c, [M, N])
    m0 = tv.block_idx(0) * bm
    n0 = tv.block_idx(1) * bn
    acc = tv.zeros([bm, bn], tv.f32)
    for k0 in tv.range(0, K, bk):
        ta = tv.load_global(ga, [m0, k0], [bm, bk])  # zeros outside A
        tb = tv.load_global(gb, [k0, n0], [bk, bn])  # zeros outside B
        acc = tv.dot(ta, tb, acc)
    tv.store_global(gc, acc.to(tv.f16), [m0, n0])


def example_inputs(rng: np.random.Generator, M: int | None = None, N: int | None = None,
                   K: int | None = None, **constants):
    """A random ragged problem: M, N, K not multiples of the tile sizes (unless given)."""
    M = int(rng.integers(1, 70)) if M is None else M
    N = int(rng.integers(40, 90)) if N is None else N
    K = int(rng.integers(40, 160)) if K is None else K
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, dtype=np.float16)
    return [a, b, c, M, N, K], constants


def reference(a, b, c, M, N, K, **constants) -> dict[int, np.ndarray]:
    """Output argument index -> expected values (float64)."""
    return {2: a.astype(np.float64) @ b.astype(np.float64)}
