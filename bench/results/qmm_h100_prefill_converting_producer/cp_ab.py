"""cp_ab.py OUT SHAPES DTYPES ROUNDS: the shared-weights kernel (tuned tiling: 256 x 128, 8
warps, 4 stages, x 2 k-tiles ahead, wide stores) with its weights converted by a producer
warpgroup (`producer=R`: `tv.producer_warp(registers=R, converts=True)`, session 26: the
consumers only wait for the converted tiles and multiply) against the kernel as the tuner
runs it (codes a loop iteration ahead). M = 4096, f16, group 128, L2 read flush. Every
variant is first compared with the base bitwise on ragged shapes (the base is GPU-tested
against float64; a mismatching variant is reported and not timed), and its output sum
with the base's on each timed layer."""
# ruff: noqa: E501
import sys

from tilevm.bench.ab import shared_weights_ab

out, shapes, dtypes, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), int(sys.argv[4])
TUNED = dict(group_size=128, wide_stores=True)
VARIANTS = {"base": dict(prefetch=4), "c120p1": dict(producer=120, prefetch=1),
            "c136p1": dict(producer=136, prefetch=1), "c136p2": dict(producer=136, prefetch=2),
            "c152p2": dict(producer=152, prefetch=2)}
shared_weights_ab(TUNED, VARIANTS, out, shapes, dtypes, rounds)
