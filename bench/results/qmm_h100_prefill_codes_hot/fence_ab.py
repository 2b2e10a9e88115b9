"""fence_ab.py OUT SHAPES DTYPES ROUNDS: whether the async-proxy fence before each
k-tile's barrier waits for the codes' loads in flight: the tuned shared-weights kernel
as it is, without the fence (`nofence.patch`: a race, timing only), and without the
fence reading only the first two k-tiles' codes (`codes_hot.patch`); M = 4096, f16,
group 128, read flush, beside cuBLAS. The variants are the program renamed (the name is
part of the cache key); a program named `..._nofence` is built without the fence."""

import sys
from dataclasses import replace

from tilevm.bench.ab import build_renamed_with_env, time_variants
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel

build_renamed_with_env("_nofence", "TILEVM_NOFENCE", "1")
out, shapes, dtypes, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), \
    int(sys.argv[4])
TUNED = dict(group_size=128, wide_stores=True, prefetch=4)


def variants(wdtype):
    kernel = qmm_wgmma_shared_kernel("f16")
    base = kernel.specialize(wdtype=wdtype, **TUNED)
    hot = kernel.specialize(wdtype=wdtype, codes_hot=True, **TUNED)
    return {"base": base, "nofence": replace(base, name=base.name + "_nofence"),
            "hot": hot, "hot_nofence": replace(hot, name=hot.name + "_nofence")}


for rnd in range(rounds):
    time_variants(variants, out, shapes, dtypes, tag={"round": rnd}, min_reps=50, cublas=True)
