"""examples/attention.py compiled: for sm_80 and sm_90a, to PTX that ptxas accepts without
spills, on the tensor cores, with cp.async and ldmatrix; and on the GPU (marked `gpu`),
for sequence lengths 128 and 1000, causal and not, f16 and bf16, against a float64
softmax computed here. (tests/vm/test_attention.py checks it in the interpreter.)"""

from __future__ import annotations

import math

import numpy as np
import pytest
from kernel_harness import ROOT, SPILL_SLACK, compile_once, load_module, ptxas_report

from tilevm.backend.launch import launch_program
from tilevm.cli.common import compare
from tilevm.vm import lang as tv

attention = load_module(ROOT / "examples" / "attention.py")
KERNELS = {"f16": attention.attention, "bf16": attention.make_attention(tv.bf16)}
# p is rounded to the input type before `p @ v` (see the example's ATOL).
ATOLS = {"f16": attention.ATOL, "bf16": 2.0 ** -6}


def float64_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """`softmax(q k^T / sqrt(d) + mask) v` in float64, the mask from index comparisons."""
    S, d = q.shape[1], q.shape[2]
    scores = np.einsum("bqd,bkd->bqk", q, k) / math.sqrt(d)
    if causal:
        later = np.arange(S)[None, :] > np.arange(S)[:, None]  # key after query
        scores = np.where(later, -np.inf, scores)
    weights = np.exp(scores - scores.max(axis=2, keepdims=True))
    return np.einsum("bqk,bkd->bqd", weights / weights.sum(axis=2, keepdims=True), v)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("constants", [
    {"causal": False}, {"causal": True}, {"causal": True, "block_q": 128, "num_warps": 8},
], ids=["full", "causal", "causal-bq128"])
def test_attention_compiles_without_spills(constants, arch):
    kernel = attention.attention
    ptx = compile_once(kernel.specialize(**constants), arch).ptx
    report = ptxas_report(ptx, arch)[kernel.name]
    assert max(report.spill_stores, report.spill_loads) <= SPILL_SLACK, str(report)
    for instruction in ("mma.sync.aligned.m16n8k16", "cp.async", "ldmatrix", "ex2.approx"):
        assert instruction in ptx, instruction


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("S", [128, 1000])
@pytest.mark.parametrize("d", [64, 128])
def test_attention_on_the_gpu(dtype, causal, S, d):
    kernel = KERNELS[dtype]
    host_type = kernel.signature.params[0].type.dtype
    args, constants = attention.example_inputs(np.random.default_rng(S + d), kernel=kernel,
                                               S=S, BH=3, d=d, causal=causal)
    launch_program(kernel.specialize(**constants), args)
    got = attention.from_host(args[3], host_type)
    q, k, v = (attention.from_host(a, host_type) for a in args[:3])
    ok, stats = compare(got, float64_attention(q, k, v, causal), ATOLS[dtype])
    assert ok, f"{dtype} S={S} d={d} causal={causal}: {stats}"
