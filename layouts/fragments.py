"""Register layouts of the tensor-core instructions' fragments, built from primitives.

Each function returns a plain `RegisterLayout` over one warp (32 threads); local
index `i` is the fragment element the PTX ISA calls `a_i` / `b_i` / `c_i` (elements
numbered low to high through the thread's registers), and the tile coordinate is
(row, column) of the instruction's matrix. They are written as products of the
primitives rather than as tables so that the layout algebra (division, conversion,
the GF(2) view) sees their structure; the tests compare every (thread, register)
with the ISA's formulas, where `groupID = lane >> 2` and
`threadID_in_group = lane % 4`.

Reading a product: in `P * Q` every element of P becomes a tile of Q, so the left
factors hold the high ("which 8x8 block") digits and the right factors the low ones;
the thread index is the product of the spatial factors, the local index the product
of the local factors, major to minor from left to right.
"""

from __future__ import annotations

from tilevm.layouts.errors import LayoutError
from tilevm.layouts.register_layout import (
    RegisterLayout,
    column_local,
    column_spatial,
    local,
    spatial,
)

# One 8x8 block as the tensor cores spread it: 8 groups of 4 lanes, lane = 4*group + t.
# Row-block layouts give the group a row and `t` a pair/quad of columns; column-block
# layouts (B operands, .trans loads) give the group a column and `t` some rows.


def mma_m16n8k16_a() -> RegisterLayout:
    """A of mma.m16n8k16 with .f16/.bf16: a 16x16 (m x k) tile, 32 threads x 8 locals.

    a_i: row = groupID + 8*((i >> 1) & 1), col = 2*threadID_in_group + (i & 1) + 8*(i >> 2).
    The 2x2 grid of 8x8 blocks is visited column-major (rows 0-7 then 8-15 of columns
    0-7, then of columns 8-15), hence `column_local(2, 2)`.
    """
    return column_local(2, 2) * spatial(8, 4) * local(1, 2)


def mma_m16n8k16_b() -> RegisterLayout:
    """B of mma.m16n8k16 with .f16/.bf16: a 16x8 (k x n) tile, 32 threads x 4 locals.

    b_i: row = 2*threadID_in_group + (i & 1) + 8*(i >> 1), col = groupID.
    """
    return local(2, 1) * column_spatial(4, 8) * local(2, 1)


def mma_m16n8k16_c() -> RegisterLayout:
    """C/D of mma.m16n8k16 (f32, or f16 in f16x2 registers): 16x8 (m x n), 32 x 4.

    c_i: row = groupID + 8*(i >> 1), col = 2*threadID_in_group + (i & 1).
    """
    return local(2, 1) * spatial(8, 4) * local(1, 2)


def mma_m16n8k32_a() -> RegisterLayout:
    """A of mma.m16n8k32 with 8-bit types (.s8/.u8/.e4m3/.e5m2): 16x32, 32 x 16 locals.

    a_i: row = groupID + 8*((i >> 2) & 1), col = 4*threadID_in_group + (i & 3) + 16*(i >> 3).
    """
    return column_local(2, 2) * spatial(8, 4) * local(1, 4)


def mma_m16n8k32_b() -> RegisterLayout:
    """B of mma.m16n8k32 with 8-bit types: a 32x8 (k x n) tile, 32 threads x 8 locals.

    b_i: row = 4*threadID_in_group + (i & 3) + 16*(i >> 2), col = groupID.
    """
    return local(2, 1) * column_spatial(4, 8) * local(4, 1)


def mma_m16n8k32_c() -> RegisterLayout:
    """C/D of mma.m16n8k32 (.s32 or .f32): 16x8, the same layout as m16n8k16's C."""
    return mma_m16n8k16_c()


def ldmatrix(num: int = 1, trans: bool = False) -> RegisterLayout:
    """What each thread receives from `ldmatrix.sync.aligned.m8n8.x{num}{.trans}.b16`.

    Coordinates are those of the matrices as they sit in shared memory, stacked along
    dimension 0: the tile is `(8*num) x 8` elements of 16 bits, and tile row r is the
    row whose address lane r supplies (matrix m = rows 8m..8m+7, from lanes 8m..8m+7).
    Matrix m lands in destination register m, so local index i = 2*m + j is the j-th
    16-bit half (low half first) of register m.

    - no .trans: lane holds row 8m + groupID, columns 2*threadID_in_group + j;
    - .trans:    lane holds row 8m + 2*threadID_in_group + j, column groupID (the
      matrix is delivered column-major: each register holds two rows of one column).

    Loading an mma operand is then a matter of which rows the lanes point at: the
    m16n8k16 A tile is `ldmatrix(4)` over the blocks (rows 0-7, cols 0-7), (rows 8-15,
    cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15); a row-major (k x n) B tile
    is exactly `ldmatrix(2, trans=True)`.
    """
    if num not in (1, 2, 4):
        raise LayoutError(f"ldmatrix loads 1, 2 or 4 matrices, got num={num!r}")
    if trans:
        return local(num, 1) * column_spatial(4, 8) * local(2, 1)
    return local(num, 1) * spatial(8, 4) * local(1, 2)
