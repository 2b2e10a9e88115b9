"""copy_after_dot_ab.py INFLIGHT OUT SHAPES DTYPES: the shared-weights kernel with the copies
after the conversion (as at 67ee182) or right after the `dot` (`early=1`), with and without
the re-bias fold (`fold`; both from variants.patch on 67ee182)."""

# ruff: noqa: E402
import sys

import tilevm.backend.lowering.wgmma_waits as ww

ww.IN_FLIGHT_AFTER_DOT = int(sys.argv[1])  # before anything is compiled

from tilevm.bench.ab import time_variants
from tilevm.dtypes import parse
from tilevm.kernels.qmm import rebias_exponent
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel


def variants(wdtype):
    ss = qmm_wgmma_shared_kernel("f16")
    found = {"ss": ss.specialize(wdtype=wdtype, group_size=128, prefetch=3),
             "ss.early": ss.specialize(wdtype=wdtype, group_size=128, prefetch=3, early=1)}
    e = rebias_exponent(wdtype, parse("f16"))
    if e:
        found["ss.fold"] = ss.specialize(wdtype=wdtype, group_size=128, prefetch=3, fold=e)
        found["ss.early.fold"] = ss.specialize(wdtype=wdtype, group_size=128, prefetch=3,
                                               fold=e, early=1)
    return found


time_variants(variants, sys.argv[2], sys.argv[3].split(","), sys.argv[4].split(","),
              tag={"inflight": ww.IN_FLIGHT_AFTER_DOT})
