# usage: scaleab.py ROOT OUT.jsonl DTYPES MS SHAPES -> per case, the best time over the
# tuner's candidate set, with the package at ROOT
import importlib.util
import itertools
import json
import sys
import time
from multiprocessing import Pool

SHAPES = {"8b.qkv": (12288, 4096), "70b.qkv": (10240, 8192), "70b.o": (8192, 8192),
          "70b.gate_up": (57344, 8192), "70b.down": (8192, 28672)}

def load(root):
    spec = importlib.util.spec_from_file_location("tilevm", f"{root}/__init__.py",
                                                  submodule_search_locations=[root])
    m = importlib.util.module_from_spec(spec)
    sys.modules["tilevm"] = m
    spec.loader.exec_module(m)

def cands(M, N, K):
    from tilevm.kernels.schedule import candidates
    return candidates(M, N, K, 128, hopper=True)

def build(job):
    wd, s = job
    from tilevm import dtypes
    from tilevm.backend import cache
    from tilevm.backend.launch import build_artifact
    from tilevm.ir.printer import format_program
    from tilevm.kernels.qmm import qmm_kernel
    p = qmm_kernel("f16").specialize(wdtype=dtypes.parse(wd), group_size=128, has_zeros=False,
                                     **s.constants())
    cache.get_or_build(cache.CacheKey(format_program(p), "sm_90a"),
                       lambda: build_artifact(p, "sm_90a"))

if __name__ == "__main__":
    root, out = sys.argv[1], sys.argv[2]
    dts, shapes = sys.argv[3].split(","), sys.argv[5].split(",")
    ms = [int(m) for m in sys.argv[4].split(",")]
    load(root)
    jobs = list(dict.fromkeys((wd, s) for wd, M, sh in itertools.product(dts, ms, shapes)
                              for s in cands(M, *SHAPES[sh])))
    t0 = time.time()
    with Pool(15, initializer=load, initargs=(root,)) as pool:
        pool.map(build, jobs, chunksize=2)
    print(root, "built", len(jobs), round(time.time() - t0), flush=True)
    import torch

    from tilevm.bench.qmm import Timer
    from tilevm.kernels.matmul import quantized_matmul
    from tilevm.kernels.weights import quantize
    timer = Timer(min_reps=40, l2_flush="read")
    f = open(out, "a")
    for sh in shapes:
        N, K = SHAPES[sh]
        torch.manual_seed(0)
        w = torch.randn(K, N, device="cuda", dtype=torch.float16)
        for wd in dts:
            qw = quantize(w, wd, 128, format="fragments")
            for M in ms:
                x = torch.randn(M, K, device="cuda", dtype=torch.float16)
                t = {}
                for s in cands(M, N, K):
                    def run(x=x, qw=qw, s=s):
                        return quantized_matmul(x, qw, schedule=s)
                    t[str(s)] = round(timer(run)[0] * 1e6, 2)
                best = min(t, key=t.get)
                rec = dict(root=root, shape=sh, M=M, dtype=wd, best=best, us=t[best], all=t)
                print(sh, M, wd, t[best], best, flush=True)
                f.write(json.dumps(rec) + "\n")
                f.flush()
