"""inflight_final_ab.py INFLIGHT OUT SHAPES DTYPES: the shared-weights kernel as tuned at
34269d9 (prefetch 4), run with wgmma_waits.IN_FLIGHT_AFTER_DOT = INFLIGHT (1 or 2)."""

# ruff: noqa: E402
import sys

import tilevm.backend.lowering.wgmma_waits as ww

ww.IN_FLIGHT_AFTER_DOT = int(sys.argv[1])

from tilevm.bench.ab import time_variants
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel


def variants(wdtype):
    ss = qmm_wgmma_shared_kernel("f16")
    return {"pf4": ss.specialize(wdtype=wdtype, group_size=128, prefetch=4)}


time_variants(variants, sys.argv[2], sys.argv[3].split(","), sys.argv[4].split(","),
              tag={"inflight": ww.IN_FLIGHT_AFTER_DOT})
