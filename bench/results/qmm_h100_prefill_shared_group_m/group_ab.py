"""group_ab.py OUT SHAPES DTYPES ROUNDS: the shared-weights kernel (tuned tiling) with its
blocks' tiles in groups of 4 and 16 row tiles against the tuned 8 (`group_m`,
`qmm_wgmma.grouped_tiles`, chosen on the register-A kernel with 128-row tiles in
`../qmm_h100_prefill_grouped_tiles/`): with 256-row tiles, whether more blocks sharing
a column tile's codes (read from L2 rather than DRAM) pays. M = 4096, f16, group 128,
read flush, beside cuBLAS (`bench.ab.shared_weights_ab`: bitwise checks first)."""

import sys

from tilevm.bench.ab import shared_weights_ab

out, shapes, dtypes, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), \
    int(sys.argv[4])
TUNED = dict(group_size=128, wide_stores=True, prefetch=4)
shared_weights_ab(TUNED, {"g8": {}, "g4": dict(group_m=4), "g16": dict(group_m=16)}, out,
                  shapes, dtypes, rounds)
