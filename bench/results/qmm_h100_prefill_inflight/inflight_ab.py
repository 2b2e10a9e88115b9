"""inflight_ab.py OUT SHAPES DTYPES ROUNDS: the shared-weights kernel (tuned tiling) with
two wgmma groups left in flight after each `dot` instead of one (`inflight.patch`: the
wait analysis's limit for a `dot` whose A operand is in shared memory, so no registers
are pinned; the wait for the previous k-tile's group then lands before the next barrier,
after the conversion, instead of right after the `dot`) against the kernel as the tuner
runs it. M = 4096, f16, group 128, L2 read flush, beside cuBLAS (`bench.ab`). The
variant is the same program renamed `..._inflight2`: the name is part of the cache key,
and the build of a program so named runs with the limit set."""

import sys
from dataclasses import replace

import tilevm.kernels.qmm_wgmma_shared as shared_module
from tilevm.bench.ab import build_renamed_with_env, shared_weights_ab

build_renamed_with_env("_inflight2", "TILEVM_INFLIGHT_SHARED", "2")
_factory = shared_module.qmm_wgmma_shared_kernel


class Renamed:
    def __init__(self, kernel):
        self.kernel = kernel

    def specialize(self, inflight=1, **kw):
        program = self.kernel.specialize(**kw)
        return replace(program, name=f"{program.name}_inflight{inflight}") \
            if inflight != 1 else program


shared_module.qmm_wgmma_shared_kernel = lambda act: Renamed(_factory(act))

out, shapes, dtypes, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), \
    int(sys.argv[4])
TUNED = dict(group_size=128, wide_stores=True, prefetch=4)
shared_weights_ab(TUNED, {"base": {}, "inflight2": dict(inflight=2)}, out, shapes, dtypes,
                  rounds)
