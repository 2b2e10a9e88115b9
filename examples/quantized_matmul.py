"""W(b)A16 quantized matmul: `y[M, N] = x[M, K] @ dequant(W)[K, N]`.

Activations `x` and the output `y` are f16; the weights are `b`-bit codes of any
1..8-bit type (`int3`, `uint5`, `f4e2m1`, `f6e3m2`, `f8e4m3`, ...; the compile-time
constant `wdtype`), bit-packed, with one f16 scale per group of `group_size` rows of K
and per column. The kernel is written the way it runs on a GPU:

- the k-loop streams tiles of x and of the packed weights through **shared memory**
  with `copy_async`, **two stages** deep: while stage s is being computed, the copy of
  the next k-tile into the other stage is in flight (`copy_async` + `copy_async_commit`
  issue it, `copy_async_wait(1)` retires everything but the newest group, `sync` makes
  every thread's copies visible; the `sync` after the compute lets the next copy
  overwrite the stage). The two stages are two shared tiles, selected by an unrolled
  (compile-time) loop over the stage inside the runtime loop;
- `load_shared` brings the packed bytes into registers, each thread holding `b`
  consecutive bytes of a row, and `view` reinterprets those same bits as 8 `b`-bit
  weights per byte run (no data moves: `b` bytes hold exactly 8 codes);
- `cast` to f16 (exact: `wdtype` must be a type whose values are all f16 values, which
  excludes only the finite-only floats with 5+ exponent bits, e.g. f7e5m1), multiply by
  the group's scale (a
  `[1, bn]` row, broadcast over the k-tile), `dot` with the f16 activations into an
  f32 accumulator; finally `cast` to f16 and a bounds-masked store.

Weight format
-------------
- `codes[K, N]`: the `wdtype` code (`tilevm.dtypes.encode`) of every weight.
- The weights argument is the uint8 matrix `w[K, N * b / 8]`: row k holds the N codes of
  row k of W packed along N by `tilevm.dtypes.pack`, element n at bits
  `[n*b, (n+1)*b)` of the row (little-endian bit stream: bit j of the row is bit
  `j % 8` of byte `j // 8`). `pack_weights(codes, wdtype)` builds it.
- `scales[K / group_size, N]`, f16: `W[k, n] = decode(codes[k, n]) * scales[k // g, n]`.
  No zero points: signed and float formats are symmetric around 0; unsigned formats
  represent only weights >= 0 (`quantize` saturates negative weights to 0).
- Requirements: N is a multiple of 8 (so every row is whole bytes, and a tile of
  `bn` columns starts on a byte); K is a multiple of `group_size`, which is a multiple
  of `bk` (so a k-tile never straddles two scale groups). M is arbitrary.

Tiles: `bm x bn` of y per block, k-tiles of `bk = 32`; `bn` must be a multiple of 8 and
`8 * num_warps * 32 / bn` must divide `bk` (the register layouts of the weight tile use
every thread of the block). Ragged edges (M, the last N tile) are handled by the
copies (elements outside the tensor are filled with zeros, which dequantize to 0) and
by the masked store. When K / bk is odd, the unrolled pipeline computes one extra
all-zero k-tile.

    vmc run examples/quantized_matmul.py --interpret --set wdtype=int3 --set group_size=32
"""

import numpy as np

from tilevm import dtypes
from tilevm.dtypes import DataType
from tilevm.layouts import local
from tilevm.vm import lang as tv


@tv.kernel(num_warps=4)
def quantized_matmul(x: tv.ptr(tv.f16, const=True), w: tv.ptr(tv.uint8, const=True),
                     scales: tv.ptr(tv.f16, const=True), y: tv.ptr(tv.f16),
                     M: tv.int32, N: tv.int32, K: tv.int32,
                     *, wdtype: DataType = tv.int4, group_size: int = 128,
                     bm: int = 16, bn: int = 64, bk: int = 32, num_warps: int = 4):
    b = wdtype.bits
    tv.static_assert(1 <= b <= 8, f"wdtype must have 1..8 bits, got {wdtype}")
    tv.static_assert(exact_in_f16(wdtype), f"the values of {wdtype} are not all f16 values")
    tv.static_assert(bn % 8 == 0 and group_size % bk == 0,
                     "bn must be a multiple of 8 and group_size a multiple of bk")
    # Register layouts of the weight tile: threads t0 x t1 over the [bk, bn] tile, each
    # holding r row-runs of 8 weights (= b bytes) along N.
    t1 = bn // 8
    t0 = num_warps * 32 // t1
    tv.static_assert(t0 * t1 == num_warps * 32 and bk % t0 == 0,
                     f"bn={bn}, bk={bk} do not fit {num_warps * 32} threads")
    r = bk // t0
    byte_layout = local(r, 1).spatial(t0, t1).local(1, b)  # [bk, bn*b/8] bytes
    code_layout = local(r, 1).spatial(t0, t1).local(1, 8)  # [bk, bn] b-bit codes

    # The weight format's requirements, stated so the runtime rejects other sizes before
    # launch and the compiler may use them (x rows of K f16 values are 16-byte aligned).
    tv.assume(N % 8 == 0)
    tv.assume(K % group_size == 0)

    tv.grid(tv.cdiv(M, bm), tv.cdiv(N, bn))
    gx = tv.global_view(x, [M, K])
    gw = tv.global_view(w, [K, N * b // 8])
    gs = tv.global_view(scales, [K // group_size, N])
    gy = tv.global_view(y, [M, N])
    m0 = tv.block_idx(0) * bm
    n0 = tv.block_idx(1) * bn
    nb0 = tv.block_idx(1) * (bn * b // 8)  # the tile's first byte column

    xs = [tv.alloc_shared(tv.f16, [bm, bk]) for _ in range(2)]
    ws = [tv.alloc_shared(tv.uint8, [bk, bn * b // 8]) for _ in range(2)]

    # Prologue: start the copy of the first k-tile into stage 0.
    tv.copy_async(xs[0], gx, [m0, 0])
    tv.copy_async(ws[0], gw, [0, nb0])
    tv.copy_async_commit()

    acc = tv.zeros([bm, bn], tv.f32)
    for k0 in tv.range(0, K, 2 * bk):
        for s in range(2):  # unrolled: stage s holds the k-tile at k0 + s * bk
            k = k0 + s * bk if s else k0
            # Prefetch the next k-tile into the other stage.
            tv.copy_async(xs[1 - s], gx, [m0, k + bk])
            tv.copy_async(ws[1 - s], gw, [k + bk, nb0])
            tv.copy_async_commit()
            tv.copy_async_wait(1)  # this stage's group has landed ...
            tv.sync()  # ... for every thread

            xa = tv.load_shared(xs[s], [0, 0], [bm, bk])
            packed = tv.load_shared(ws[s], [0, 0], [bk, bn * b // 8], layout=byte_layout)
            codes = tv.view(packed, wdtype, [bk, bn], code_layout)
            scale = tv.load_global(gs, [k // group_size, n0], [1, bn])
            wt = tv.cast(codes, tv.f16) * scale
            acc = tv.dot(xa, wt, acc)
            tv.sync()  # every thread is done with stage s before it is refilled
    tv.copy_async_wait(0)
    tv.store_global(gy, tv.cast(acc, tv.f16), [m0, n0])


def exact_in_f16(wdtype: DataType) -> bool:
    """Whether every finite value of `wdtype` is an f16 value, so that the kernel's `cast`
    to f16 is exact: every 1..8-bit type except the finite-only floats with 5 or more
    exponent bits (f6e5m0, f7e5m1, f7e6m0, f8e6m1, f8e7m0), whose range exceeds f16's."""
    values = dtypes.decode(np.arange(1 << wdtype.bits), wdtype)
    values = values[np.isfinite(values)]
    with np.errstate(over="ignore"):
        return bool(np.array_equal(values.astype(np.float16).astype(np.float64), values))


# ---- host side: the weight format -------------------------------------------------------

def pack_weights(codes: np.ndarray, wdtype: DataType | str) -> np.ndarray:
    """`codes[K, N]` (b-bit codes, N a multiple of 8) -> the uint8 matrix `[K, N*b/8]`,
    each row packed along N with `tilevm.dtypes.pack`."""
    wdtype = dtypes.parse(wdtype)
    codes = np.asarray(codes)
    K, N = codes.shape
    if N % 8:
        raise ValueError(f"N must be a multiple of 8 (rows of whole bytes), got {N}")
    # Rows are whole bytes, so packing the flattened matrix packs every row on its own.
    return dtypes.pack(codes.reshape(-1), wdtype.bits).reshape(K, N * wdtype.bits // 8)


def unpack_weights(packed: np.ndarray, wdtype: DataType | str) -> np.ndarray:
    """The inverse of `pack_weights`: `[K, N*b/8]` bytes -> `codes[K, N]`."""
    wdtype = dtypes.parse(wdtype)
    K, row_bytes = packed.shape
    N = row_bytes * 8 // wdtype.bits
    return dtypes.unpack(np.ascontiguousarray(packed).reshape(-1), wdtype.bits,
                         K * N).reshape(K, N)


def dequantize(packed: np.ndarray, scales: np.ndarray, wdtype: DataType | str,
               group_size: int) -> np.ndarray:
    """The float64 weights `decode(codes) * scales` (scales repeated over each group)."""
    values = dtypes.decode(unpack_weights(packed, wdtype), wdtype)
    return values * np.repeat(scales.astype(np.float64), group_size, axis=0)


def quantize(weights: np.ndarray, wdtype: DataType | str, group_size: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """Float weights `[K, N]` -> (`pack_weights` bytes, f16 `scales[K/g, N]`): each group's
    scale maps its largest magnitude to the format's largest value; codes round to
    nearest even (`dtypes.encode`). Unsigned formats have no zero point: negative
    weights saturate to 0."""
    wdtype = dtypes.parse(wdtype)
    w = np.asarray(weights, dtype=np.float64)
    K, N = w.shape
    if K % group_size:
        raise ValueError(f"K ({K}) must be a multiple of group_size ({group_size})")
    groups = w.reshape(K // group_size, group_size, N)
    amax = np.abs(groups).max(axis=1)
    scales = np.where(amax > 0, amax / float(wdtype.max), 1.0).astype(np.float16)
    scales = np.where(scales > 0, scales, np.float16(2.0 ** -24))  # never a zero scale
    scaled = groups / scales.astype(np.float64)[:, None, :]
    codes = dtypes.encode(scaled.reshape(K, N), wdtype)
    return pack_weights(codes, wdtype), scales


# ---- the example protocol (vmc run, tests) ------------------------------------------------

def random_codes(rng: np.random.Generator, shape: tuple[int, ...], wdtype: DataType
                 ) -> np.ndarray:
    """Uniformly random codes of `wdtype` over every code of a finite value."""
    codes = rng.integers(0, 1 << wdtype.bits, size=shape).astype(np.uint8)
    bad = ~np.isfinite(dtypes.decode(codes, wdtype))  # NaN (f8e4m3), inf (f8e5m2)
    while bad.any():
        codes[bad] = rng.integers(0, 1 << wdtype.bits, size=int(bad.sum()))
        bad = ~np.isfinite(dtypes.decode(codes, wdtype))
    return codes


def example_inputs(rng: np.random.Generator, M: int | None = None, N: int | None = None,
                   K: int | None = None, **constants):
    """A random problem: arbitrary M, N a multiple of 8, K a multiple of the group size;
    every code of the weight type is equally likely, scales are random positive f16."""
    wdtype = dtypes.parse(constants.setdefault("wdtype", tv.int4))
    constants["wdtype"] = wdtype
    g = constants.setdefault("group_size", 128)
    M = int(rng.integers(1, 40)) if M is None else M
    N = 8 * int(rng.integers(5, 11)) if N is None else N
    K = g * int(rng.integers(1, max(2, 512 // g))) if K is None else K
    x = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    w = pack_weights(random_codes(rng, (K, N), wdtype), wdtype)
    largest = max(abs(float(wdtype.min)), float(wdtype.max))
    scales = (rng.uniform(0.5, 2.0, (K // g, N)) / largest).astype(np.float16)
    y = np.full((M, N), np.nan, dtype=np.float16)
    return [x, w, scales, y, M, N, K], constants


def reference(x, w, scales, y, M, N, K, *, wdtype=tv.int4, group_size=128,
              **constants) -> dict[int, np.ndarray]:
    """Output argument index -> expected values: `x @ (decode(codes) * scales)` in float64."""
    return {3: x.astype(np.float64) @ dequantize(w, scales, wdtype, group_size)}


# The kernel rounds each dequantized weight to f16 before the dot (as the GPU does): its
# error against the float64 reference is that rounding (relative 2^-11 per weight, summed
# over K), beyond f32 accumulation. `vmc run` and the tests allow for it (see cli.py).
ATOL = 2.0 ** -9
