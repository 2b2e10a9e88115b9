"""two_blocks_ab.py OUT SHAPES DTYPES ROUNDS: the half-atom wgmma kernel with 4 warps
(64 columns, 256 rows: 27 K registers and, with 3 stages, 97 KB of shared memory a
block, so two blocks share an SM and one's prologue and epilogue overlap the other's
main loop) against its tuned 8-warp tiling (one block an SM). M = 4096, f16, group 128,
L2 read flush, beside cuBLAS (`bench.ab.checked_ab`)."""

import sys

from tilevm.bench.ab import checked_ab
from tilevm.dtypes import parse
from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel

out, shapes, dtypes, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), \
    int(sys.argv[4])
# label: (num_warps, stages, lead, prefetch); the first is the tuned tiling
TILES = {"w8_s4l2p2": (8, 4, 2, 2), "w4_s3l1p2": (4, 3, 1, 2), "w4_s3l2p2": (4, 3, 2, 2),
         "w4_s2l1p1": (4, 2, 1, 1)}


def variants(wdtype):
    return {label: qmm_wgmma_kernel("f16").specialize(
        wdtype=wdtype, group_size=128, wide_stores=True, half_atoms=True, bm=256,
        num_warps=warps, stages=stages, lead=lead, prefetch=prefetch)
        for label, (warps, stages, lead, prefetch) in TILES.items()}


checked_ab({name: variants(parse(name)) for name in dtypes}, out, shapes, rounds)
