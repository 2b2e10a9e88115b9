"""Experiment (issue 48): does a second block per SM raise the register-A wgmma kernel's
throughput at M = 64? The same split launches capped at 1 and 2 blocks per SM."""
import json, statistics
import torch
from tilevm.kernels import quantize
from tilevm.kernels import matmul as mm
from tilevm.kernels.schedule import wgmma

flush = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
for N, K, M in ((12288, 4096, 64), (4096, 14336, 64)):
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    qw = quantize(w, "int4", 128, format="fragments")
    del w
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    todo = [wgmma(64, 4, 4, 128, lead=2, prefetch=p, half_atoms=h, split_k=s)
            for (p, h) in ((2, False), (4, True)) for s in (1, 2, 4)]
    mm._prebuild(qw, todo, N)
    stream = torch.cuda.current_stream().cuda_stream
    weights = (qw.packed, qw.scales, qw.scales)
    launches = []
    for s in todo:
        ws, counters = mm._splitk_buffers(x.device, M, N, s, stream)
        for cap in (None, 1, 2, 3):
            launches.append((s, cap, ws, counters, mm._qmm(qw, s, N).prepare(
                x, *weights, y, ws, counters, M, N, K, max_blocks_per_sm=cap)))
    refs = {}
    times = [[] for _ in launches]
    for rep in range(16):
        for i, (s, cap, ws, counters, p) in enumerate(launches):
            y.fill_(float("nan"))
            flush.zero_()
            torch.cuda._sleep(int(2e9 * 100e-6))
            b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            b.record(); p.submit(stream, (x.data_ptr(), qw.packed.data_ptr(), qw.scales.data_ptr(), qw.scales.data_ptr(), y.data_ptr(), ws.data_ptr(), counters.data_ptr())); e.record(); e.synchronize()
            if rep:
                times[i].append(b.elapsed_time(e) * 1e3)
            if rep == 0:
                if s not in refs:
                    refs[s] = y.clone()
                assert torch.equal(y, refs[s]), (str(s), cap)
    for (s, cap, *_), t in zip(launches, times):
        print(json.dumps({"N": N, "K": K, "M": M, "schedule": str(s), "cap": cap,
                          "us": statistics.median(t), "spread": [min(t), max(t)]}), flush=True)
    del x, y, qw
    torch.cuda.empty_cache()
