"""pw8_ab.py OUT SHAPES DTYPES ROUNDS (with two_producers.patch applied): the shared-weights
kernel (tuned tiling: 256 x 128, 8 warps, 4 stages, x 2 k-tiles ahead, wide stores) with
its weights converted by two producer warpgroups (`producer=R` under TV_PW8=1: 8 warps
convert as the 8 consumers do in the tuned kernel; 512 threads, so each m64n256 wgmma is
cut into two m64n128) against the kernel as the tuner runs it (codes a loop iteration
ahead). M = 4096, f16, group 128, L2 read flush. Every
variant is first compared with the base bitwise on ragged shapes (the base is GPU-tested
against float64; a mismatching variant is reported and not timed), and its output sum
with the base's on each timed layer."""
# ruff: noqa: E501
import os
import sys

from tilevm.bench.ab import shared_weights_ab

out, shapes, dtypes, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), int(sys.argv[4])
TUNED = dict(group_size=128, wide_stores=True)
VARIANTS = {"base": dict(prefetch=4), "w96p1": dict(producer=96, prefetch=1),
            "w96p2": dict(producer=96, prefetch=2), "w88p2": dict(producer=88, prefetch=2),
            "w96p3": dict(producer=96, prefetch=3)}


def before(kw):
    os.environ["TV_PW8"] = "1" if kw.get("producer") else ""


shared_weights_ab(TUNED, VARIANTS, out, shapes, dtypes, rounds, before=before)
