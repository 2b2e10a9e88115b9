# usage: ringab.py OUT.jsonl DTYPES MS SHAPES  -> ring kernel sweep vs tuned streaming vs cuBLAS
# (read flush)
import itertools
import json
import sys
import time
from multiprocessing import Pool

SHAPES = {"8b.qkv": (12288, 4096), "70b.qkv": (10240, 8192), "70b.o": (8192, 8192),
          "70b.gate_up": (57344, 8192), "70b.down": (8192, 28672), "8b.o": (4096, 4096)}
out, dtypes_ = sys.argv[1], sys.argv[2].split(",")
ms, shapes = [int(m) for m in sys.argv[3].split(",")], sys.argv[4].split(",")
RING = [(w, st, sk) for w in (2, 4) for st in (3, 4, 6, 8) for sk in (1, 2, 4, 8, 16)]

def ring_schedules(M, N, K):
    from tilevm.kernels.schedule import Schedule
    found = []
    for w, st, sk in RING:
        blocks = -(-N // (32 * w)) * sk
        if blocks < 132 or blocks > 132 * 16:
            continue
        s = Schedule(8 if M <= 8 else 16, 64, w, sk, ring=True, stages=st)
        if s.fits(K, 128):
            found.append(s)
    return found

def jobs():
    from tilevm.kernels.schedule import candidates
    for wd, M, sh in itertools.product(dtypes_, ms, shapes):
        N, K = SHAPES[sh]
        for s in ring_schedules(M, N, K) + candidates(M, N, K, 128, hopper=True):
            yield wd, s

def build(job):
    wd, s = job
    from tilevm import dtypes
    from tilevm.backend import cache
    from tilevm.backend.launch import build_artifact
    from tilevm.ir.printer import format_program
    from tilevm.kernels.qmm import qmm_kernel
    from tilevm.kernels.qmm_ring import qmm_ring_kernel
    k = qmm_ring_kernel("f16") if s.ring else qmm_kernel("f16")
    p = k.specialize(wdtype=dtypes.parse(wd), group_size=128, has_zeros=False, **s.constants())
    key = cache.CacheKey(format_program(p), "sm_90a")
    cache.get_or_build(key, lambda: build_artifact(p, "sm_90a"))

if __name__ == "__main__":
    t0 = time.time()
    todo = list(dict.fromkeys(jobs()))
    with Pool(15) as pool:
        pool.map(build, todo, chunksize=2)
    print("built", len(todo), round(time.time() - t0), flush=True)
    import torch

    from tilevm.bench.qmm import Timer
    from tilevm.kernels.matmul import quantized_matmul, tuned_schedule
    from tilevm.kernels.weights import quantize
    timer = Timer(min_reps=40, l2_flush="read")
    f = open(out, "a")
    for sh in shapes:
        N, K = SHAPES[sh]
        torch.manual_seed(0)
        w = torch.randn(K, N, device="cuda", dtype=torch.float16)
        for M in ms:
            x = torch.randn(M, K, device="cuda", dtype=torch.float16)
            cub = timer(lambda x=x, w=w: x @ w)[0] * 1e6
            for wd in dtypes_:
                qw = quantize(w, wd, 128, format="fragments")
                ref = (x.double() @ qw.dequantize().double())
                y = quantized_matmul(x, qw, tune=True)
                torch.cuda.synchronize()
                tuned = timer(lambda x=x, qw=qw: quantized_matmul(x, qw, tune=True))[0] * 1e6
                ring = {}
                for s in ring_schedules(M, N, K):
                    y = quantized_matmul(x, qw, schedule=s)
                    err = float((y.double() - ref).abs().max() / ref.abs().max())
                    assert err < 1e-2, (str(s), err)
                    ring[str(s)] = round(
                        timer(lambda x=x, qw=qw, s=s: quantized_matmul(x, qw, schedule=s))[0] * 1e6,
                        2)
                best = min(ring, key=ring.get)
                rec = dict(shape=sh, M=M, dtype=wd, cublas=round(cub, 2), stream=round(tuned, 2),
                           stream_sched=str(tuned_schedule(x, qw)), ring_best=best,
                           ring_us=ring[best], ring=ring)
                print(sh, M, wd, "cublas", rec["cublas"], "stream", rec["stream"],
                      rec["stream_sched"], "ring", ring[best], best, round(time.time() - t0),
                      flush=True)
                f.write(json.dumps(rec) + "\n")
                f.flush()
