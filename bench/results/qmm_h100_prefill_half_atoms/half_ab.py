"""half_ab.py OUT SHAPES DTYPES ROUNDS: the A-in-registers kernel (`kernels.qmm_wgmma`) with
`half_atoms` (each warp converts 16 columns, one A fragment's rows: a warpgroup's 64
columns are one m64n256 wgmma over 256 rows of x, so each weight is converted once per
256 rows with no shared-memory round trip) against the shared-weights kernel as the
tuner runs it. M = 4096, f16, group 128, L2 read flush, beside cuBLAS (`bench.ab.
checked_ab`: each variant compared bitwise with the base on ragged shapes first, then
timed round by round); `python -m tilevm.bench.ab OUT` summarizes. `half_ab2.jsonl` was
taken with `late_cast.patch` applied and the `_late` variants below."""

import sys

from tilevm.bench.ab import checked_ab
from tilevm.dtypes import parse
from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel

out, shapes, dtypes, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), \
    int(sys.argv[4])
TUNED = dict(group_size=128, wide_stores=True, prefetch=4)
# label: (stages, lead, prefetch, converted after the barrier); half_ab.jsonl had
# h_s4l2p1, h_s4l2p2, h_s4l1p2 and h_s4l2p3
HALF = {
    "h_s4l2p2": (4, 2, 2, False), "h_s4l2p2_late": (4, 2, 2, True),
    "h_s4l2p3_late": (4, 2, 3, True), "h_s6l2p2": (6, 2, 2, False),
    "h_s6l3p2": (6, 3, 2, False), "h_s6l2p2_late": (6, 2, 2, True),
}


def variants(wdtype):
    found = {"base": qmm_wgmma_shared_kernel("f16").specialize(wdtype=wdtype, **TUNED)}
    for label, (stages, lead, prefetch, late) in HALF.items():
        found[label] = qmm_wgmma_kernel("f16").specialize(
            wdtype=wdtype, group_size=128, wide_stores=True, half_atoms=True, bm=256,
            num_warps=8, stages=stages, lead=lead, prefetch=prefetch,
            **({"late_cast": True} if late else {}))
    return found


checked_ab({name: variants(parse(name)) for name in dtypes}, out, shapes, rounds)
