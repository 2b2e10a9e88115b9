"""early_wait_ab.py INFLIGHT OUT SHAPES DTYPES: the shared-weights kernel (tuned tiling, ab1c298)
waiting for the next k-tile's copies at the top of each k-tile, or before storing the
weights (`early_wait`, an experimental flag: early_wait.patch)."""
# ruff: noqa: E402
import sys

import tilevm.backend.lowering.wgmma_waits as ww

ww.IN_FLIGHT_AFTER_DOT = int(sys.argv[1])

from tilevm.bench.ab import time_variants
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel


def variants(wdtype):
    ss = qmm_wgmma_shared_kernel("f16")
    return {"pf4": ss.specialize(wdtype=wdtype, group_size=128, prefetch=4),
            "pf4.ew": ss.specialize(wdtype=wdtype, group_size=128, prefetch=4,
                                    early_wait=True)}


time_variants(variants, sys.argv[2], sys.argv[3].split(","), sys.argv[4].split(","),
              tag={"inflight": ww.IN_FLIGHT_AFTER_DOT})
