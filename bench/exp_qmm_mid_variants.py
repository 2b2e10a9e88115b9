"""Experiment (issue 48): the register-A wgmma kernel at M = 64/256 with more weight
k-tiles in flight (prefetch), deeper x copies (lead/stages) and K splits, timed as the
tuner times (L2 flushed, median of 15). One JSON line per variant."""
import json, statistics, sys
import torch
from tilevm.kernels import quantize
from tilevm.kernels import matmul as mm
from tilevm.kernels.schedule import wgmma

CELLS = [(12288, 4096, 64), (4096, 14336, 64), (57344, 8192, 64), (4096, 14336, 256)]
WDTYPE = sys.argv[1] if len(sys.argv) > 1 else "int4"
ONLY_PREFETCH = len(sys.argv) > 2  # half atoms, p2 against p4 only
VARIANTS = []
for bm, ha in ((64, False), (64, True)):
    for stages, lead, prefetch in ((4, 2, 2), (4, 2, 3), (4, 2, 4), (4, 3, 3), (6, 3, 2),
                                   (6, 4, 4), (6, 2, 4)):
        for split in (1, 2, 3, 4):
            VARIANTS.append((bm, ha, stages, lead, prefetch, split))
flush = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")


def res(k):
    return [k.num_threads, k.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"), k.shared_bytes]


for N, K, M in CELLS:
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    qw = quantize(w, WDTYPE, 128, format="fragments")
    del w
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    todo = []
    for bm, ha, stages, lead, prefetch, split in VARIANTS:
        if M > 64 and bm == 64 and split > 2:
            continue
        if ONLY_PREFETCH and (not ha or (stages, lead) != (4, 2) or prefetch == 3 or split == 3):
            continue
        s = wgmma(bm if M <= 64 else 128, 4, stages, 128, lead=lead, prefetch=prefetch,
                  half_atoms=ha or M > 64, split_k=split)
        if s.fits(K, 128) and s not in todo:
            todo.append(s)
    try:
        mm._prebuild(qw, todo, N)
    except Exception as e:
        print(json.dumps({"N": N, "prebuild_error": str(e)[:300]}), flush=True)
    stream = torch.cuda.current_stream().cuda_stream
    plans = []
    for s in todo:
        try:
            plans.append((s, mm._plan(x, qw, y, s, stream, (M, N))))
        except Exception as e:
            print(json.dumps({"N": N, "K": K, "M": M, "schedule": str(s),
                              "error": str(e)[:300]}), flush=True)
    ref = None
    for s, plan in plans:
        mm._run(plan, x.data_ptr(), stream, y)
    torch.cuda.synchronize()
    times = [[] for _ in plans]
    for _ in range(15):
        for i, (s, plan) in enumerate(plans):
            flush.zero_()
            torch.cuda._sleep(int(2e9 * 100e-6))
            b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            b.record(); mm._run(plan, x.data_ptr(), stream, y); e.record(); e.synchronize()
            times[i].append(b.elapsed_time(e) * 1e3)
    for (s, plan), t in zip(plans, times):
        print(json.dumps({"wdtype": WDTYPE, "N": N, "K": K, "M": M, "schedule": str(s),
                          "us": statistics.median(t), "spread": [min(t), max(t)],
                          "kernel": res(mm._qmm(qw, s, N))}), flush=True)
    del x, y, qw
    torch.cuda.empty_cache()
