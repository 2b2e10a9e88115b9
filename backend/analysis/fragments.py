"""The tensor-core instructions of `dot` and the register layouts they read: per input
dtype the `mma.sync` shape and fragment layouts (`MMA_INSTRUCTIONS`), the block's warps
arranged over the mma tiles (`mma_warp_grid`, `dot_layouts`), and the layouts of a
`dot` whose b is a shared tile (wgmma: `WGMMA_DTYPES`, `wgmma_layouts`). Layout
inference asks for these layouts, instruction selection and the lowerings read them."""

from __future__ import annotations

from tilevm.dtypes import DataType, parse
from tilevm.layouts import (
    RegisterLayout,
    local,
    mma_m16n8k16_a,
    mma_m16n8k16_b,
    mma_m16n8k16_c,
    mma_m16n8k32_a,
    mma_m16n8k32_b,
    mma_m16n8k32_c,
    replicated,
    spatial,
)

_MMA_K16 = ((16, 8, 16), mma_m16n8k16_a, mma_m16n8k16_b, mma_m16n8k16_c)
_MMA_K32 = ((16, 8, 32), mma_m16n8k32_a, mma_m16n8k32_b, mma_m16n8k32_c)

#: The tensor-core instruction of `dot` per input dtype: its (m, n, k) shape and the
#: functions building its A, B, C fragment layouts (layouts/fragments.py).
MMA_INSTRUCTIONS = {parse("f16"): _MMA_K16, parse("bf16"): _MMA_K16,
                    parse("int8"): _MMA_K32, parse("uint8"): _MMA_K32}

def mma_warp_grid(m_tiles: int, n_tiles: int, num_warps: int) -> tuple[int, int]:
    """(wm, wn): the warps of a block arranged over a grid of `m_tiles x n_tiles` mma
    tiles, wm | m_tiles and wn | n_tiles. As many warps as possible work (the rest hold
    copies); among those grids, the one whose warps read the fewest A rows plus B columns
    (16 * m_tiles / wm + 8 * n_tiles / wn), then the one with more warps along m."""
    best: tuple[tuple[int, int, int], tuple[int, int]] | None = None
    for wm in range(1, num_warps + 1):
        for wn in range(1, num_warps // wm + 1):
            if num_warps % (wm * wn) or m_tiles % wm or n_tiles % wn:
                continue
            key = (-wm * wn, 16 * m_tiles // wm + 8 * n_tiles // wn, -wm)
            if best is None or key < best[0]:
                best = (key, (wm, wn))
    assert best is not None  # (1, 1) always qualifies
    return best[1]


def dot_layouts(m: int, n: int, k: int, dtype: DataType, num_threads: int
                ) -> tuple[RegisterLayout, RegisterLayout, RegisterLayout] | None:
    """The register layouts (a, b, c) that `dot` on tensor cores reads, or None when the
    dtype has no mma instruction, a dim is not a multiple of its shape or the block is
    not whole warps.

    The block's warps form a `wm x wn` grid (`mma_warp_grid`) over c, warp index
    `w = wm_idx * wn + wn_idx` (the major thread digits; lanes are the minor ones); each
    warp owns a contiguous `(rm * 16) x (rn * 8)` block of c, `rm x rn` C fragments:

        c = spatial(wm, wn) * local(rm, rn) * C
        a = spatial(wm, 1).replicated(wn) * local(rm, k / 16) * A
        b = replicated(wm, ndim=2).spatial(1, wn) * local(k / 16, rn) * B

    a is replicated over the warps of one row of the grid (they share its rows), b over
    those of one column. With fewer fragments than warps, the spare warps are a major
    replication digit (they compute copies). For int8 read k / 32 and m16n8k32.
    """
    entry = MMA_INSTRUCTIONS.get(dtype)
    if entry is None or num_threads % 32:
        return None
    (fm, fn, fk), frag_a, frag_b, frag_c = entry
    if m % fm or n % fn or k % fk:
        return None
    mt, nt, kt = m // fm, n // fn, k // fk
    wm, wn = mma_warp_grid(mt, nt, num_threads // 32)
    spare = replicated(num_threads // 32 // (wm * wn), ndim=2)
    rm, rn = mt // wm, nt // wn
    c = spare * spatial(wm, wn) * local(rm, rn) * frag_c()
    a = spare * spatial(wm, 1) * replicated(wn, ndim=2) * local(rm, kt) * frag_a()
    b = spare * replicated(wm, ndim=2) * spatial(1, wn) * local(kt, rn) * frag_b()
    return a, b, c


#: Input dtypes of `dot` with a shared b (wgmma with A in registers).
WGMMA_DTYPES = (parse("f16"), parse("bf16"))


def wgmma_layouts(m: int, n: int, k: int, dtype: DataType, num_threads: int,
                  shared_a: bool = False, interleaved: bool = False
                  ) -> tuple[RegisterLayout | None, RegisterLayout] | None:
    """The register layouts (a, c) of a `dot` whose b is a shared tile (wgmma), or None
    when they do not fit: the block's `W` warps (whole warpgroups) split the rows, each
    holding `m / (16 W)` whole rows of fragments (all `n / 8` C fragments of a row, the
    `k / 16` A fragments of it):

        c = spatial(W, 1) * local(m / 16W, n / 8) * C
        a = spatial(W, 1) * local(m / 16W, k / 16) * A

    Row `s` of the 4 warps of a warpgroup is its `s`-th wgmma (backend/llvm/lowering/wgmma.py).
    With a shared a (`shared_a`: a is None) each wgmma reads 64 consecutive rows of a, so
    the warps' rows interleave instead: `c = local(m / 16W, 1) * spatial(W, 1) *
    local(1, n / 8) * C` (warp `w`'s row `s` is fragment row `s W + w`). So do they, and
    a's likewise, with `interleaved` (a b of several matrices: each wgmma's 64 rows must
    lie in one block of rows).
    """
    warps = num_threads // 32
    if dtype not in WGMMA_DTYPES or num_threads % 128 or m % (16 * warps) or n % 8 \
            or n > 256 or k % 16:
        return None
    rows = m // (16 * warps)
    if shared_a or interleaved:
        c = local(rows, 1) * spatial(warps, 1) * local(1, n // 8) * mma_m16n8k16_c()
        a = local(rows, 1) * spatial(warps, 1) * local(1, k // 16) * mma_m16n8k16_a()
        return None if shared_a else a, c
    return (spatial(warps, 1) * local(rows, k // 16) * mma_m16n8k16_a(),
            spatial(warps, 1) * local(rows, n // 8) * mma_m16n8k16_c())
