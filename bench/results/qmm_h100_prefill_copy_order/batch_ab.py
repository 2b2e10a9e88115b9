"""batch_ab.py INFLIGHT OUT SHAPES DTYPES: the shared-weights kernel with its codes three
k-tiles ahead, fetched one per k-tile, or four, a loop iteration at a time (the run used an
experimental flag, `batch=True` with `prefetch=3`; committed as `prefetch=4` = stages in
2aa8968: the same program)."""

# ruff: noqa: E402
import sys

import tilevm.backend.lowering.wgmma_waits as ww

ww.IN_FLIGHT_AFTER_DOT = int(sys.argv[1])  # before anything is compiled

from tilevm.bench.ab import time_variants
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel


def variants(wdtype):
    ss = qmm_wgmma_shared_kernel("f16")
    return {"pf3": ss.specialize(wdtype=wdtype, group_size=128, prefetch=3),
            "batch": ss.specialize(wdtype=wdtype, group_size=128, prefetch=4)}


time_variants(variants, sys.argv[2], sys.argv[3].split(","), sys.argv[4].split(","),
              tag={"inflight": ww.IN_FLIGHT_AFTER_DOT})
