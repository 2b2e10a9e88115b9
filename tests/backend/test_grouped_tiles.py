"""`wgmma_grid.grouped_tiles`, the order in which the prefill kernel's blocks take their
tiles, in the interpreter: a bijection onto the tiles, in group order."""

import numpy as np
import pytest

from tilevm.kernels.wgmma_grid import grouped_tiles
from tilevm.layouts import replicated
from tilevm.vm import lang as tv


@pytest.mark.parametrize("tiles_n, tiles_m, group_m", [(5, 7, 3), (4, 2, 16), (3, 6, 2),
                                                       (1, 5, 1)])
def test_grouped_tiles_cover_every_tile_once_in_group_order(tiles_n, tiles_m, group_m):
    """`wgmma_grid.grouped_tiles`: every (column, row) tile exactly once; in launch order,
    `group_m` row tiles at a time, row tile fastest (a last group may be smaller)."""
    @tv.kernel(num_warps=1)
    def tiles(out: tv.ptr(tv.int32), TN: tv.int32, TM: tv.int32):
        tv.grid(TN, TM)
        n, m = grouped_tiles(TN, TM, group_m)
        pid = tv.block_idx(1) * TN + tv.block_idx(0)
        cells = tv.global_view(out, [TN * TM, 2])
        for column, value in enumerate((n, m)):
            tv.store_global(cells, tv.full([1, 1], value, tv.int32, layout=replicated(32, ndim=2)),
                            [pid, column])

    out = np.full((tiles_n * tiles_m, 2), -1, np.int32)
    tiles.interpret(out, tiles_n, tiles_m)
    assert sorted(map(tuple, out)) == [(n, m) for n in range(tiles_n) for m in range(tiles_m)]
    expected = [(n, first + r) for first in range(0, tiles_m, group_m)
                for n in range(tiles_n) for r in range(min(group_m, tiles_m - first))]
    assert list(map(tuple, out)) == expected
