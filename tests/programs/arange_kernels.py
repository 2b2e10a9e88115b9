"""Kernels for `arange`, the index tile (kernels must live in files: their source is
read). tests/vm/test_arange.py runs them in the interpreter against numpy;
tests/backend/test_arange.py compiles them and runs them against the interpreter."""

import tilevm as tv
from tilevm.layouts import local, replicated, spatial
from tilevm.layouts.fragments import mma_m16n8k16_c

# [64, 16] as the attention example's s tiles: each of 4 warps owns 16 whole rows.
MMA_ROWS = spatial(4, 1) * local(1, 2) * mma_m16n8k16_c()


def make_index_tiles(layout=None, name: str = "index_tiles"):
    """Both index tiles of an `[m, n]` shape (rows: the index along dim 0, cols: along
    dim 1), in `layout` (inferred when None), stored as int32."""

    @tv.kernel(num_warps=4)
    def index_tiles(rows: tv.ptr(tv.int32), cols: tv.ptr(tv.int32), *, m: int = 16,
                    n: int = 32):
        tv.store_global(tv.global_view(rows, [m, n]), tv.arange([m, n], 0, layout=layout),
                        [0, 0])
        tv.store_global(tv.global_view(cols, [m, n]), tv.arange([m, n], 1, layout=layout),
                        [0, 0])

    index_tiles.name = name
    return index_tiles


index_tiles = make_index_tiles()
index_tiles_mma = make_index_tiles(MMA_ROWS, "index_tiles_mma")
index_tiles_replicated = make_index_tiles(
    replicated(2, ndim=2) * spatial(8, 8) * local(2, 4), "index_tiles_replicated")


@tv.kernel(num_warps=4)
def narrow_indices(out: tv.ptr(tv.int16), *, n: int = 256):
    """`out[i] = 2 * i - i` from an index tile of uint8 codes (packed four to a register)
    and one of int16: `i` for each i < n."""
    codes = tv.arange(n, dtype=tv.uint8)
    tv.store_global(tv.global_view(out, [n]),
                    tv.cast(codes, tv.int16) * 2 - tv.arange([n], 0, tv.int16), [0])


@tv.kernel(num_warps=4)
def masked(x: tv.ptr(tv.f32, const=True), out: tv.ptr(tv.f32), S: tv.int32, q0: tv.int32,
           k0: tv.int32, *, m: int = 32, n: int = 64):
    """The attention masks on an `[m, n]` block of scores whose rows are queries
    `q0 + r` and columns keys `k0 + c`: `-inf` where the key comes after the query
    (causal) or is not before S (ragged), the score elsewhere. The keys are a `[1, n]`
    row, broadcast; the queries a whole `[m, n]` tile, which the comparison takes its
    layout from (the scores' default layout: an int32 and an f32 tile get the same)."""
    scores = tv.load_global(tv.global_view(x, [m, n]), [0, 0], [m, n])
    query = tv.arange([m, n], 0) + q0
    key = tv.arange([1, n], 1) + k0
    seen = tv.where(key <= query, scores, float("-inf"))
    tv.store_global(tv.global_view(out, [m, n]), tv.where(key < S, seen, float("-inf")),
                    [0, 0])
