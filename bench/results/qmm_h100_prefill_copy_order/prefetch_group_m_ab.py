"""prefetch_group_m_ab.py INFLIGHT OUT SHAPES DTYPES: the shared-weights kernel with its copies
after the `dot` (75fc0e0), its codes 2, 3 or 4 k-tiles ahead one per k-tile (at 75fc0e0,
prefetch=4 still meant that), and group_m 4 / 8 / 16."""

# ruff: noqa: E402
import sys

import tilevm.backend.lowering.wgmma_waits as ww

ww.IN_FLIGHT_AFTER_DOT = int(sys.argv[1])  # before anything is compiled

from tilevm.bench.ab import time_variants
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel


def variants(wdtype):
    ss = qmm_wgmma_shared_kernel("f16")
    found = {f"pf{p}": ss.specialize(wdtype=wdtype, group_size=128, prefetch=p)
             for p in (2, 3, 4)}
    for group_m in (4, 16):
        found[f"gm{group_m}"] = ss.specialize(wdtype=wdtype, group_size=128, prefetch=3,
                                              group_m=group_m)
    return found


time_variants(variants, sys.argv[2], sys.argv[3].split(","), sys.argv[4].split(","),
              tag={"inflight": ww.IN_FLIGHT_AFTER_DOT})
