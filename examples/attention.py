"""FlashAttention forward: `o = softmax(q k^T / sqrt(d) [+ causal mask]) v`, per (batch*head).

`q`, `k`, `v` and `o` are `[BH, S, d]` tensors of f16 (`attention`) or bf16
(`make_attention(tv.bf16)`: not a module-level kernel, because `vmc run` compares outputs
as numpy floats and bf16 host arrays are uint16 codes). `d` (64 or 128), `causal` and the
tile sizes are compile-time constants; `BH` and the sequence length `S` are runtime sizes
(any S: ragged tiles are masked). Block `(i, bh)` of the grid `(cdiv(S, block_q), BH)`
computes the rows `[i * block_q, (i + 1) * block_q)` of slice `bh`. It shows

- the whole attention matrix never leaving the chip: the block loads its q tile once,
  then streams K and V tiles of `block_kv` keys through shared memory (`copy_async`, then
  `load_shared` into registers), overlapping each copy with the compute of the other
  operand: K of the next tile is copied while this tile's softmax and `p @ v` run, V of
  the next tile while its `q @ k^T` runs;
- `s = q @ k^T` with `tv.dot` on a K-major shared tile: K^T is a transposed global view
  (`strides=[1, d]`), so each key's d values stay contiguous in the copy;
- register tiles in slices of 16 (the k of one `mma.m16n8k16`): q is held as d/16 column
  slices, s and p as block_kv/16 column slices, and K^T and V reach registers one
  16-row slice at a time, so no whole K or V tile sits in registers. The layouts are
  given: each warp owns whole rows of s and of the accumulator, so the row max and sum
  stay inside a warp, and an f16 slice of p is already the `a` operand of the next `dot`
  (the accumulator's fragments of two 8-column tiles are the operand's 16 columns);
- the online softmax (running row max `m`, running row sum `l`, both f32 `[block_q, 1]`
  tiles): for each tile, `m_new = max(m, rowmax(s))`, `p = exp(s - m_new)`,
  `l = l * exp(m - m_new) + rowsum(p)`, `acc = acc * exp(m - m_new) + p @ v`; at the end
  `o = acc / l`. The scale 1/sqrt(d) and log2(e) are folded into one multiplication,
  so the exponentials are `exp2`;
- two phases of the kv loop (a Python loop over a compile-time flag, so the body is
  traced twice): the key tiles every row of the block sees whole run unmasked; the rest
  (the tiles on the causal diagonal, or the last ragged tile) set the scores of the keys
  a row must not see to -inf. Causal blocks skip every key tile past the diagonal.

The masks come from index tiles (`tv.arange`), compared with runtime offsets: in the
slice of keys `kv0 + j + c` (c < K_STEP) of the rows `q0 + r`, the causal mask keeps
`kv0 + j + c <= q0 + r`, i.e. `c - r <= q0 - kv0 - j` (one `[block_q, K_STEP]` tile of
`c - r` in s's layout, against a scalar), and the ragged mask keeps the keys before S,
`c < S - kv0 - j` (a `[1, K_STEP]` row, broadcast over the rows). Each thread computes
the indices of the elements it holds from its thread index: no memory, no
synchronization. Rows of q past S compute on zeros and are never stored.

    vmc run examples/attention.py --interpret --set S=40 --set causal=True
"""

import math

import numpy as np

from tilevm import dtypes
from tilevm.dtypes import DataType
from tilevm.layouts import RegisterLayout, local, replicated, spatial
from tilevm.layouts.fragments import mma_m16n8k16_b, mma_m16n8k16_c
from tilevm.layouts.shared_layout import swizzled
from tilevm.vm import lang as tv

LOG2E = 1.0 / math.log(2.0)
K_STEP = 16  # the k of one mma.m16n8k16: operands go to registers 16 wide


def rows_per_warp(num_warps: int, rows: int, cols: int) -> RegisterLayout:
    """The layout of an f32 `[rows, cols]` mma accumulator whose warps each own
    `rows / num_warps` whole rows."""
    return (spatial(num_warps, 1) * local(rows // (16 * num_warps), cols // 8)
            * mma_m16n8k16_c())


def make_attention(dtype: DataType) -> tv.Kernel:
    """The attention kernel for `[BH, S, d]` tensors of `dtype` (f16 or bf16)."""

    @tv.kernel(num_warps=4)
    def attention(q: tv.ptr(dtype, const=True), k: tv.ptr(dtype, const=True),
                  v: tv.ptr(dtype, const=True), o: tv.ptr(dtype), S: tv.int32, BH: tv.int32,
                  *, d: int = 64, causal: bool = False, block_q: int = 64,
                  block_kv: int = 64, num_warps: int = 4):
        tv.static_assert(d in (64, 128), f"d must be 64 or 128, got {d}")
        tv.static_assert(block_q % block_kv == 0,
                         f"block_q ({block_q}) must be a multiple of block_kv ({block_kv})")
        tv.static_assert(block_q % (16 * num_warps) == 0 and block_kv % K_STEP == 0,
                         f"block_q ({block_q}) must be a multiple of 16 * num_warps and "
                         f"block_kv ({block_kv}) of {K_STEP}")
        # Each warp owns whole rows of s and of the accumulator (the mma accumulator's
        # fragments tiled over them), so the row max and sum stay inside a warp.
        s_layout = rows_per_warp(num_warps, block_q, K_STEP)
        acc_layout = rows_per_warp(num_warps, block_q, d)
        row_layout = s_layout.reduce(1)
        v_layout = replicated(num_warps, ndim=2) * local(1, d // 8) * mma_m16n8k16_b()
        tv.grid(tv.cdiv(S, block_q), BH)
        q0 = tv.block_idx(0) * block_q
        base = tv.block_idx(1) * S * d  # the first element of slice bh
        gq = tv.global_view(q, [S, d], offset=base)
        gkt = tv.global_view(k, [d, S], strides=[1, d], offset=base)  # K^T
        gv = tv.global_view(v, [S, d], offset=base)
        go = tv.global_view(o, [S, d], offset=base)

        qs = tv.alloc_shared(dtype, [block_q, d])
        kts = tv.alloc_shared(dtype, [d, block_kv],
                              layout=swizzled([block_kv, d], dtype).permute((1, 0)))
        vs = tv.alloc_shared(dtype, [block_kv, d])

        # Prologue: q with the first K tile (one group), the first V tile (the next).
        tv.copy_async(qs, gq, [q0, 0])
        tv.copy_async(kts, gkt, [0, 0])
        tv.copy_async_commit()
        tv.copy_async(vs, gv, [0, 0])
        tv.copy_async_commit()

        if causal:  # tiles before the diagonal are whole; the last one ends at the last row
            kv_whole = q0
            kv_end = tv.min(S, q0 + block_q)
        else:  # every tile but a ragged last one is whole
            kv_whole = S // block_kv * block_kv
            kv_end = S

        tv.copy_async_wait(1)  # q and the first K tile have landed ...
        tv.sync()  # ... for every thread
        # q in registers for the whole kernel, as slices of K_STEP columns (a Python list:
        # read, never rebound, in the loop).
        qt = [tv.load_shared(qs, [0, i], [block_q, K_STEP]) for i in range(0, d, K_STEP)]
        scale = LOG2E / math.sqrt(d)  # exp(x / sqrt(d)) = exp2(x * scale)
        m = tv.full([block_q, 1], float("-inf"), tv.f32, layout=row_layout)
        l_sum = tv.zeros([block_q, 1], tv.f32, layout=row_layout)
        acc = tv.zeros([block_q, d], tv.f32, layout=acc_layout)
        for masked in (False, True):  # unrolled: the same body, without and with a mask
            start, stop = (0, kv_whole) if not masked else (kv_whole, kv_end)
            for kv0 in tv.range(start, stop, block_kv):
                # K of this tile has landed (V may still be in flight). s in slices of
                # K_STEP keys: s[j] = q @ K^T[:, keys j], one K_STEP x K_STEP slice of K^T
                # in registers at a time.
                s = []
                for j in range(0, block_kv, K_STEP):
                    part = tv.zeros([block_q, K_STEP], tv.f32, layout=s_layout)
                    for i in range(0, d, K_STEP):
                        kt = tv.load_shared(kts, [i, j], [K_STEP, K_STEP])
                        part = tv.dot(qt[i // K_STEP], kt, part, layout=s_layout)
                    s.append(part * scale)
                tv.sync()  # every thread has read K: refill it with the next tile
                tv.copy_async(kts, gkt, [0, kv0 + block_kv])
                tv.copy_async_commit()
                if masked:
                    if causal:  # c - r, for key kv0 + j + c and query q0 + r
                        ahead = (tv.arange([block_q, K_STEP], 1, layout=s_layout)
                                 - tv.arange([block_q, K_STEP], 0, layout=s_layout))
                    else:  # c
                        column = tv.arange([1, K_STEP], 1)
                    for j in range(0, block_kv, K_STEP):
                        if causal:  # key <= query
                            seen = ahead <= q0 - kv0 - j
                        else:  # key < S
                            seen = column < S - kv0 - j
                        s[j // K_STEP] = tv.where(seen, s[j // K_STEP], float("-inf"))
                m_new = m
                for part in s:
                    m_new = tv.maximum(m_new, tv.max(part, 1, keepdim=True))
                alpha = tv.exp2(m - m_new)
                p = [tv.exp2(part - m_new) for part in s]
                l_sum = l_sum * alpha
                for part in p:
                    l_sum = l_sum + tv.sum(part, 1, keepdim=True)
                m = m_new
                tv.copy_async_wait(1)  # V of this tile has landed ...
                tv.sync()  # ... for every thread
                acc = acc * alpha
                for j in range(0, block_kv, K_STEP):
                    vt = tv.load_shared(vs, [j, 0], [K_STEP, d], layout=v_layout)
                    acc = tv.dot(tv.cast(p[j // K_STEP], dtype), vt, acc, layout=acc_layout)
                tv.sync()  # every thread has read V: refill it with the next tile
                tv.copy_async(vs, gv, [kv0 + block_kv, 0])
                tv.copy_async_commit()
                tv.copy_async_wait(1)  # the next K tile has landed
                tv.sync()
        tv.copy_async_wait(0)
        tv.store_global(go, tv.cast(acc / l_sum, dtype), [q0, 0])

    attention.name = "attention" if dtype == tv.f16 else f"attention_{dtype}"
    return attention


attention = make_attention(tv.f16)


# ---- the example protocol (vmc run, tests) ------------------------------------------------

def to_host(values: np.ndarray, dtype: DataType) -> np.ndarray:
    """`values` rounded to `dtype`, as the host array a kernel argument of `dtype` is
    (float16 for f16; the uint16 codes for bf16: `tilevm.dtypes.host_dtype`)."""
    if dtype == tv.f16:
        return np.asarray(values).astype(np.float16)
    return dtypes.encode(values, dtype).astype(dtypes.host_dtype(dtype))


def from_host(array: np.ndarray, dtype: DataType) -> np.ndarray:
    """The float64 values of a host array of `dtype` (the inverse of `to_host`)."""
    return dtypes.decode(array, dtype) if dtype == tv.bf16 else array.astype(np.float64)


def example_inputs(rng: np.random.Generator, kernel: tv.Kernel = attention,
                   S: int | None = None, BH: int = 2, **constants):
    """A random problem: BH slices of S queries, keys and values (S ragged unless given),
    standard normal values rounded to the kernel's type."""
    d = constants.setdefault("d", 64)
    S = int(rng.integers(20, 100)) if S is None else S
    dtype = kernel.signature.params[0].type.dtype
    q, k, v = (to_host(rng.standard_normal((BH, S, d)), dtype) for _ in range(3))
    o = to_host(np.full((BH, S, d), np.nan), dtype)
    return [q, k, v, o, S, BH], constants


def reference(q, k, v, o, S, BH, *, d: int = 64, causal: bool = False,
              **constants) -> dict[int, np.ndarray]:
    """Output argument index -> expected values (float64), for f16 arguments."""
    return {3: attention_reference(q, k, v, causal)}


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool
                        ) -> np.ndarray:
    """`softmax(q k^T / sqrt(d) [+ causal mask]) v` in float64 over `[BH, S, d]` values."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    S, d = q.shape[1], q.shape[2]
    s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
    if causal:
        s = np.where(np.tril(np.ones((S, S), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=2, keepdims=True))
    return (p / p.sum(axis=2, keepdims=True)) @ v


# The kernel rounds p to the input type before `p @ v` (as every FlashAttention does):
# each output is off by up to 2^-11 (f16) of the values it averages, beyond f32
# accumulation. bf16 (2^-8) needs 2^-6 (tests/vm/test_attention.py).
ATOL = 2.0 ** -9
