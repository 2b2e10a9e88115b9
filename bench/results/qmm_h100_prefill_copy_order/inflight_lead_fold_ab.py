"""inflight_lead_fold_ab.py INFLIGHT OUT SHAPES DTYPES: the shared-weights kernel (copies
after the conversion, as at 67ee182) with wgmma_waits.IN_FLIGHT_AFTER_DOT = INFLIGHT: as it
was, x one k-tile ahead, and the float re-bias folded into the scale (`fold`, from
variants.patch on 67ee182)."""

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
             "ss.lead1": ss.specialize(wdtype=wdtype, group_size=128, prefetch=3, lead=1)}
    e = rebias_exponent(wdtype, parse("f16"))
    if e:
        found["ss.fold"] = ss.specialize(wdtype=wdtype, group_size=128, prefetch=3, fold=e)
    return found


time_variants(variants, sys.argv[2], sys.argv[3].split(","), sys.argv[4].split(","),
              tag={"inflight": ww.IN_FLIGHT_AFTER_DOT})
