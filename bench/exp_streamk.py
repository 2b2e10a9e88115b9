"""Experiment (issue 48): stream-K against the register-A wgmma kernel's middle tilings
(unsplit and split) at M = 64 / 256, int4 (or argv[1]), timed back to back in a CUDA
graph over weight copies larger than L2 (the graph method's conditions). One JSON line
per (cell, schedule)."""
import json, statistics, sys
import torch
from tilevm.kernels import quantize
from tilevm.kernels import matmul as mm
from tilevm.kernels.schedule import middle_tiles, wgmma

WDTYPE = sys.argv[1] if len(sys.argv) > 1 else "int4"
CELLS = [(12288, 4096, 64), (4096, 14336, 64), (4096, 4096, 64), (10240, 8192, 64),
         (57344, 8192, 64), (8192, 28672, 64), (4096, 14336, 256), (12288, 4096, 256)]
bits = int("".join(c for c in WDTYPE if c.isdigit()) or 4) if WDTYPE[0] in "iu" else 6
L2 = torch.cuda.get_device_properties(0).L2_cache_size
for N, K, M in CELLS:
    todo = [s for s in middle_tiles(M, 128, bits) if s.fits(K, 128)]
    todo += [wgmma(64, 4, 4, 128, lead=2, prefetch=2, stream_k=1),
             wgmma(64, 4, 4, 128, lead=2, prefetch=4, half_atoms=True, stream_k=1),
             wgmma(64, 4, 4, 128, lead=2, prefetch=4, half_atoms=True, stream_k=2),
             wgmma(64, 4, 4, 128, lead=2, prefetch=4, half_atoms=True, stream_k=3),
             wgmma(64, 8, 4, 128, lead=2, prefetch=4, half_atoms=True, stream_k=1),
             wgmma(64, 8, 4, 128, lead=2, prefetch=4, half_atoms=True, stream_k=2)]
    if M > 64:
        todo += [wgmma(128, 4, 4, 128, lead=2, prefetch=4, half_atoms=True, stream_k=1),
                 wgmma(128, 4, 4, 128, lead=2, prefetch=2, half_atoms=False, stream_k=1)]
    if bits % 2:
        todo = [s for s in todo if not s.half_atoms]
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    first = quantize(w, WDTYPE, 128, format="fragments")
    del w
    nbytes = first.packed.numel() + first.scales.numel() * 2
    copies = max(1, min(16, -(-3 * L2 // nbytes)))
    qws = [first] + [quantize(torch.randn(K, N, device="cuda", dtype=torch.float16), WDTYPE,
                              128, format="fragments") for _ in range(copies - 1)]
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    try:
        mm._prebuild(first, todo, N)
    except Exception as e:
        print(json.dumps({"N": N, "prebuild_error": str(e)[:300]}), flush=True)
    stream = torch.cuda.Stream()
    ref = x.double() @ first.dequantize().double()
    for s in todo:
        try:
            with torch.cuda.stream(stream):
                plans = [mm._plan(x, q, y, s, stream.cuda_stream, (M, N)) for q in qws]
                out = mm._run(plans[0], x.data_ptr(), stream.cuda_stream)
                stream.synchronize()
                err = float((out.double() - ref).abs().max() / ref.abs().max())
                again = mm._run(plans[0], x.data_ptr(), stream.cuda_stream)
                stream.synchronize()
                same = bool(torch.equal(out, again))
                for p in plans:
                    mm._run(p, x.data_ptr(), stream.cuda_stream, y)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            calls = 4 * copies
            with torch.cuda.graph(g, stream=stream):
                for i in range(calls):
                    mm._run(plans[i % copies], x.data_ptr(), stream.cuda_stream, y)
            g.replay(); torch.cuda.synchronize()
            t = []
            for _ in range(7):
                b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                b.record(); g.replay(); e.record(); e.synchronize()
                t.append(b.elapsed_time(e) * 1e3 / calls)
            k = mm._qmm(first, s, N)
            print(json.dumps({"wdtype": WDTYPE, "N": N, "K": K, "M": M, "schedule": str(s),
                              "us": statistics.median(t), "spread": [min(t), max(t)],
                              "rel_err": err, "repeatable": same,
                              "regs": k.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS")}), flush=True)
        except Exception as e:
            print(json.dumps({"N": N, "K": K, "M": M, "schedule": str(s),
                              "error": f"{type(e).__name__}: {str(e)[:300]}"}), flush=True)
    del qws, first, x, y
    torch.cuda.empty_cache()
