"""early_ab.py OUT SHAPES DTYPES ROUNDS: the shared-weights kernel (tuned tiling: 256 x 128,
8 warps, 4 stages, x 2 k-tiles ahead, codes a loop iteration ahead, wide stores) with its
weights converted two k-tiles ahead of their `dot` and stored right after the next
barrier (`early.patch`: the `stmatrix` stores drain while the warps convert the next
k-tile, instead of right before the barrier they wait at) against the kernel as the
tuner runs it. M = 4096, f16, group 128, L2 read flush, beside cuBLAS (`bench.ab`: each
variant compared bitwise with the base on ragged shapes first, then timed round by
round; `python -m tilevm.bench.ab OUT` summarizes)."""

import sys

from tilevm.bench.ab import shared_weights_ab

out, shapes, dtypes, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), \
    int(sys.argv[4])
TUNED = dict(group_size=128, wide_stores=True, prefetch=4)
shared_weights_ab(TUNED, {"base": {}, "early": dict(early=True)}, out, shapes, dtypes, rounds)
