"""tile_rows_ab.py INFLIGHT OUT SHAPES DTYPES: the shared-weights kernel (75fc0e0) with 256
rows and x two k-tiles ahead of 4 stages, or 192 / 224 rows, which leave room in shared
memory for 5 stages and x three k-tiles ahead."""

# ruff: noqa: E402
import sys

import tilevm.backend.lowering.wgmma_waits as ww

ww.IN_FLIGHT_AFTER_DOT = int(sys.argv[1])  # before anything is compiled

from tilevm.bench.ab import time_variants
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel


def variants(wdtype):
    ss = qmm_wgmma_shared_kernel("f16")
    return {f"{bm}.{stages}.{lead}": ss.specialize(wdtype=wdtype, group_size=128, prefetch=3,
                                                   bm=bm, stages=stages, lead=lead)
            for bm, stages, lead in ((256, 4, 2), (192, 4, 2), (192, 5, 3), (224, 5, 3))}


time_variants(variants, sys.argv[2], sys.argv[3].split(","), sys.argv[4].split(","),
              tag={"inflight": ww.IN_FLIGHT_AFTER_DOT})
