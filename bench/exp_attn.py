"""Experiment (issue 45): the attention example against torch SDPA (flash backend),
d=128, f16, 16k tokens per batch (B = 16384 / S), 16 heads. Timer as bench.qmm's
(events behind a GPU sleep, L2 flushed by a read). One JSON line per (S, causal, kernel)."""
import json, math
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import tilevm as tv
from tilevm.bench.examples import load_example
from tilevm.bench.timing import Timer

att = load_example("attention").attention
timer = Timer(min_reps=20, l2_flush="read")
CONFIGS = [(64, 64, 4), (128, 64, 8), (128, 32, 8), (128, 128, 8), (64, 32, 4)]
H, d = 16, 128
for S in (1024, 2048, 4096, 8192, 16384):
    B = 16384 // S
    BH = B * H
    q, k, v = (torch.randn(B, H, S, d, device="cuda", dtype=torch.float16) for _ in range(3))
    for causal in (False, True):
        flops = 4 * S * S * d * BH * (0.5 if causal else 1.0)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            sec, reps, _ = timer(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        print(json.dumps({"S": S, "BH": BH, "causal": causal, "kernel": "sdpa_flash",
                          "us": sec * 1e6, "tflops": flops / sec / 1e12, "reps": reps}), flush=True)
        qf, kf, vf = (t.reshape(BH, S, d) for t in (q, k, v))
        o = torch.empty_like(qf)
        for bq, bkv, w in CONFIGS:
            try:
                kern = tv.compile(att, d=d, causal=causal, block_q=bq, block_kv=bkv, num_warps=w)
            except Exception as e:  # noqa
                print(json.dumps({"S": S, "causal": causal, "config": [bq, bkv, w],
                                  "error": str(e)[:200]}), flush=True)
                continue
            kern(qf, kf, vf, o, S, BH)
            err = (o.reshape(B, H, S, d).float() - ref.float()).abs().max().item()
            sec, reps, _ = timer(lambda: kern(qf, kf, vf, o, S, BH))
            print(json.dumps({"S": S, "BH": BH, "causal": causal, "kernel": "tilevm",
                              "config": [bq, bkv, w], "us": sec * 1e6,
                              "tflops": flops / sec / 1e12, "max_abs_err": err,
                              "regs": kern.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"),
                              "reps": reps}), flush=True)
    del q, k, v
    torch.cuda.empty_cache()
