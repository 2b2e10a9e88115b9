"""kernels.mlp_sync: the quantized MLP fused by tile synchronization, in the interpreter
(the specification): gate_up with the silu * up epilogue and down waiting for its rows
agree with a float64 reference, and run together under adversarial interleavings
they give what running them one after the other gives, call after call (the
semaphores never reset)."""

from __future__ import annotations

import numpy as np
import pytest

from tilevm.kernels.mlp_sync import interleave_gate_up, mlp_kernels
from tilevm.kernels.weight_format import FRAGMENTS, pack_weights
from tilevm.kernels.weights import QuantizedWeight
from tilevm.vm import lang as tv
from tilevm.vm.interpreter import run, run_together

M, H, F, G = 16, 256, 128, 128  # rows, hidden, intermediate features, group size
BN = 128  # gate_up's tile columns (4 warps x 32)
CONSTANTS = dict(wdtype=tv.int4, group_size=G, bm=16, bk=64, num_warps=4, stages=2,
                 lead=1, prefetch=1)


def weights(rng, codes):
    K, N = codes.shape
    scales = (rng.uniform(0.5, 2.0, (K // G, N)) / 8).astype(np.float16)
    return QuantizedWeight(pack_weights(codes.astype(np.uint8), "int4", FRAGMENTS), scales,
                           None, tv.int4, G, (K, N), FRAGMENTS)


def problem(seed):
    rng = np.random.default_rng(seed)
    gate, up = rng.integers(0, 16, (H, F)), rng.integers(0, 16, (H, F))
    gate_up = weights(rng, interleave_gate_up(gate, up, BN))
    down = weights(rng, rng.integers(0, 16, (F, H)))
    x = rng.uniform(-1, 1, (M, H)).astype(np.float16)
    return x, gate_up, down


def launches(x, gate_up, down, h, sem, y, generation):
    make, use = mlp_kernels("f16")
    return [(make.specialize(**CONSTANTS),
             [x, gate_up.packed, gate_up.scales, gate_up.scales, h, sem, M, 2 * F, H]),
            (use.specialize(producer_bn=BN, **CONSTANTS),
             [h, down.packed, down.scales, down.scales, y, sem, M, H, F, generation])]


def buffers():
    return (np.full((M, F), np.nan, np.float16), np.zeros(1, np.int32),
            np.full((M, H), np.nan, np.float16))


def test_the_interleaving_puts_gate_then_up_in_each_tile():
    gate = np.arange(8 * 128).reshape(8, 128)
    both = interleave_gate_up(gate, -gate, BN)
    assert both.shape == (8, 256)
    assert (both[:, :64] == gate[:, :64]).all() and (both[:, 64:128] == -gate[:, :64]).all()
    assert (both[:, 128:192] == gate[:, 64:]).all()
    with pytest.raises(ValueError, match="a multiple of 64"):
        interleave_gate_up(gate[:, :100], gate[:, :100], BN)


def test_the_pair_computes_the_mlp():
    x, gate_up, down = problem(0)
    h, sem, y = buffers()
    for program, args in launches(x, gate_up, down, h, sem, y, 1):
        run(program, args)
    w = np.asarray(gate_up.dequantize(), np.float64).reshape(H, F // 64, 2, 64)
    g = x.astype(np.float64) @ w[:, :, 0].reshape(H, F)
    u = x.astype(np.float64) @ w[:, :, 1].reshape(H, F)
    want_h = g / (1 + np.exp(-g)) * u
    assert np.allclose(h.astype(np.float64), want_h, rtol=2e-3,
                       atol=2e-3 * np.abs(want_h).max())
    want_y = h.astype(np.float64) @ np.asarray(down.dequantize(), np.float64)
    assert np.allclose(y.astype(np.float64), want_y, rtol=2e-3,
                       atol=2e-3 * np.abs(want_y).max())
    assert sem[0] == 2 * F // BN


@pytest.mark.parametrize("seed", range(3))
def test_synchronized_runs_agree_with_serialized_ones(seed):
    x, gate_up, down = problem(seed)
    h0, sem0, y0 = buffers()
    for program, args in launches(x, gate_up, down, h0, sem0, y0, 1):
        run(program, args)
    h, sem, y = buffers()
    for generation in (1, 2):
        h[:], y[:] = np.nan, np.nan
        run_together(launches(x, gate_up, down, h, sem, y, generation)[::-1],
                     seed=seed * 10 + generation)
        assert np.array_equal(h, h0) and np.array_equal(y, y0)
