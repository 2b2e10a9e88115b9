"""hot_ab.py OUT SHAPES DTYPES ROUNDS: how much of the shared-weights kernel's time is
waiting for its codes: the tuned tiling as it is against the same kernel reading only
the first two k-tiles' codes over and over (`codes_hot.patch`: every load an L1/L2 hit;
the results are wrong, so no bitwise check), M = 4096, f16, group 128, read flush, beside
cuBLAS (`bench.ab.time_variants`, rounds alternating)."""

import sys

from tilevm.bench.ab import time_variants
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel

out, shapes, dtypes, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), \
    int(sys.argv[4])
TUNED = dict(group_size=128, wide_stores=True, prefetch=4)


def variants(wdtype):
    kernel = qmm_wgmma_shared_kernel("f16")
    return {"base": kernel.specialize(wdtype=wdtype, **TUNED),
            "hot": kernel.specialize(wdtype=wdtype, codes_hot=True, **TUNED)}


for rnd in range(rounds):
    time_variants(variants, out, shapes, dtypes, tag={"round": rnd}, min_reps=50, cublas=True)
