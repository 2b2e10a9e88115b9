"""tree_ab.py ROOT TAG OUT SHAPES DTYPES: the shared-weights kernel (tuned tiling) with tilevm
imported from ROOT (a tree), rows tagged tree=TAG."""
import importlib.util
import sys

root = sys.argv[1]
spec = importlib.util.spec_from_file_location("tilevm", f"{root}/__init__.py",
                                              submodule_search_locations=[root])
m = importlib.util.module_from_spec(spec)
sys.modules["tilevm"] = m
spec.loader.exec_module(m)

from tilevm.bench.ab import time_variants  # noqa: E402
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel  # noqa: E402


def variants(wdtype):
    return {"ss": qmm_wgmma_shared_kernel("f16").specialize(wdtype=wdtype, group_size=128,
                                                            prefetch=4)}


time_variants(variants, sys.argv[3], sys.argv[4].split(","), sys.argv[5].split(","),
              tag={"tree": sys.argv[2]})
