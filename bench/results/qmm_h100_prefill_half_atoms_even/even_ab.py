"""even_ab.py OUT SHAPES DTYPES ROUNDS: the wgmma kernel with half atoms for codes of
any even width (the format storing each half atom's codes as one run of a lane's bytes)
against the shared-weights kernel as the tuner runs it. M = 4096, f16, group 128, L2
read flush, beside cuBLAS (`bench.ab.checked_ab`: each variant compared bitwise with
the base on ragged shapes first, then timed round by round); `python -m tilevm.bench.ab
OUT` summarizes."""

import sys

from tilevm.bench.ab import checked_ab
from tilevm.dtypes import parse
from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel

out, shapes, dtypes, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), \
    int(sys.argv[4])
TUNED = dict(group_size=128, wide_stores=True, prefetch=4)
HALF = {"h_p2": 2, "h_p1": 1, "h_p3": 3}  # label: k-tiles of codes ahead (4 stages, lead 2)


def variants(wdtype):
    found = {"base": qmm_wgmma_shared_kernel("f16").specialize(wdtype=wdtype, **TUNED)}
    for label, prefetch in HALF.items():
        found[label] = qmm_wgmma_kernel("f16").specialize(
            wdtype=wdtype, group_size=128, wide_stores=True, half_atoms=True, bm=256,
            num_warps=8, stages=4, lead=2, prefetch=prefetch)
    return found


checked_ab({name: variants(parse(name)) for name in dtypes}, out, shapes, rounds)
