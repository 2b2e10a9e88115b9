"""producer_ab.py OUT SHAPES DTYPES ROUNDS: the shared-weights kernel (tuned tiling: 256 x 128,
8 warps, 4 stages, codes a loop iteration ahead, wide stores) with its TMA copies (x and
the scales) issued by a producer warpgroup (`producer=R`: `tv.producer_warp(R)`, the
consumers keep the weights' conversion and their barrier), x 2 or 3 k-tiles ahead, against
the kernel as the tuner runs it (session 24; run with producer.patch applied: the
`producer` parameter is not in the library). M = 4096, f16, group 128, L2 read flush.
Every variant is first compared with the base bitwise on ragged shapes (the base is
GPU-tested against float64; a mismatching variant is reported and not timed), and its
output sum with the base's on each timed layer."""
# ruff: noqa: E501
import sys

from tilevm.bench.ab import shared_weights_ab

out, shapes, dtypes, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), int(sys.argv[4])
TUNED = dict(group_size=128, prefetch=4, wide_stores=True)
VARIANTS = {"base": {}, "p40": dict(producer=40), "p40_l3": dict(producer=40, lead=3),
            "p24_l3": dict(producer=24, lead=3), "p56_l3": dict(producer=56, lead=3)}
shared_weights_ab(TUNED, VARIANTS, out, shapes, dtypes, rounds)
