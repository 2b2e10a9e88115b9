"""fold_ab.py OUT SHAPES DTYPES ROUNDS: the shared-weights kernel (tuned tiling: 256 x 128,
8 warps, 4 stages, x 2 k-tiles ahead, codes a loop iteration ahead, wide stores) with a
low-bit float's re-bias folded into its scales (`fold_rebias.patch`: the k-tile's scales
multiplied by 2^e once instead of every converted pair) against the kernel as the tuner
runs it. M = 4096, f16, group 128, L2 read flush, beside cuBLAS (`bench.ab`: each
variant compared bitwise with the base on ragged shapes first, then timed round by
round; `python -m tilevm.bench.ab OUT` summarizes)."""

import sys

from tilevm.bench.ab import shared_weights_ab

out, shapes, dtypes, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), \
    int(sys.argv[4])
TUNED = dict(group_size=128, wide_stores=True, prefetch=4)
shared_weights_ab(TUNED, {"base": {}, "fold": dict(fold_rebias=True)}, out, shapes, dtypes,
                  rounds)
