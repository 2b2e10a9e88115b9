"""wgmma_copy_order_ab.py INFLIGHT OUT SHAPES DTYPES: the wgmma kernel's copies before its
`dot` (as it is) or after it (`early=1`, variants.patch on 67ee182), beside the
shared-weights kernel with its copies after the `dot`."""

# ruff: noqa: E402
import sys

import tilevm.backend.lowering.wgmma_waits as ww

ww.IN_FLIGHT_AFTER_DOT = int(sys.argv[1])  # before anything is compiled

from tilevm.bench.ab import time_variants
from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel

TILINGS = {"wg4.2": dict(bm=128, num_warps=4, stages=4, lead=2),
           "wg2.1": dict(bm=128, num_warps=4, stages=2, lead=1),
           "wg8.4.2": dict(bm=128, num_warps=8, stages=4, lead=2)}


def variants(wdtype):
    ss, wg = qmm_wgmma_shared_kernel("f16"), qmm_wgmma_kernel("f16")
    found = {"ss.early": ss.specialize(wdtype=wdtype, group_size=128, prefetch=3, early=1)}
    for tag, tiling in TILINGS.items():
        for early in (0, 1):
            found[tag + ".early" * early] = wg.specialize(wdtype=wdtype, group_size=128,
                                                          early=early, **tiling)
    return found


time_variants(variants, sys.argv[2], sys.argv[3].split(","), sys.argv[4].split(","),
              tag={"inflight": ww.IN_FLIGHT_AFTER_DOT})
