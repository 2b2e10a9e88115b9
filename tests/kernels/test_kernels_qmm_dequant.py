"""The dequantize-then-multiply prefill pair (`kernels.qmm_dequant`): the dequantization
kernel against the weight format's own decoding (numpy, rounded as the kernels round),
the matmul kernel against float64 numpy, both in the interpreter (ragged N, M and K; K
not a whole loop iteration); its schedule and where the tuner times it. (On the GPU,
through `quantized_matmul`: `test_kernels_qmm.test_gpu_schedules_and_zero_points` and
`test_gpu_dequant_pair`.)"""

from __future__ import annotations

import numpy as np
import pytest

from tilevm import dtypes
from tilevm.kernels.qmm_dequant import dequantize_kernel, wt_matmul_kernel
from tilevm.kernels.schedule import Schedule, k_tile
from tilevm.kernels.tilings import (
    DEQUANT_WORKSPACE_LIMIT,
    candidates,
    dequant_schedule,
    dequant_workspace,
)
from tilevm.kernels.weight_format import FRAGMENTS
from tilevm.kernels.weights import quantize


def _expected_wt(qw, act=np.float16) -> np.ndarray:
    """W^T as the kernels round it: the code minus the zero point rounded to `act`, times
    the scale rounded again (the codes and scales are exact in `act`)."""
    K, N = qw.shape
    g = qw.group_size
    codes = dtypes.decode(qw.codes(), qw.dtype).astype(np.float64).reshape(K // g, g, N)
    scales = qw.scales[:, None, :N].astype(np.float64)
    if qw.zeros is not None:
        codes = (codes - qw.zeros[:, None, :N].astype(np.float64)).astype(act)
    return (codes.astype(np.float64) * scales).astype(act).reshape(K, N).T


@pytest.mark.parametrize("wdtype, g, zeros, K, N", [
    ("f6e3m2", 128, False, 256, 96),  # N past the 64-column tiles: padded, stored
    ("int8", 64, False, 128, 128),
    ("uint3", 64, True, 192, 32),
    ("int5", 32, False, 96, 64),  # 32-row k-tiles
    ("f4e2m1", 128, False, 128, 40),  # N padded to 64
])
def test_dequantize_kernel_writes_the_weights_transposed(wdtype, g, zeros, K, N):
    rng = np.random.default_rng(0)
    qw = quantize(rng.standard_normal((K, N)), wdtype, g, zero_point=zeros, format=FRAGMENTS)
    Np = qw.scales.shape[1]
    wt = np.full((Np, K), np.nan, np.float16)
    dequantize_kernel("f16").interpret(
        qw.packed, qw.scales, qw.zeros if zeros else qw.scales, wt, N, K,
        wdtype=qw.dtype, group_size=g, has_zeros=zeros, bk=k_tile(g))
    np.testing.assert_array_equal(wt[:N], _expected_wt(qw))
    # The padding columns hold zero codes times the padding scales (ones): zeros.
    assert not wt[N:].any()


@pytest.mark.parametrize("M, N, K, bm, stages, lead, producer, wide", [
    (40, 128, 512, 64, 4, 2, False, False),
    (70, 200, 160, 32, 3, 1, False, False),  # ragged M and N; K = 160: the last
    (70, 200, 160, 32, 3, 1, False, True),  # iteration reads zeros; y through shared
    (8, 64, 96, 8, 6, 4, False, False),
    (70, 200, 160, 32, 4, 3, True, False),  # a producer warp allows lead = stages - 1
])
def test_wt_matmul_matches_float64(M, N, K, bm, stages, lead, producer, wide):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((M, K)).astype(np.float16)
    wt = rng.standard_normal((N, K)).astype(np.float16)
    y = np.full((M, N), np.nan, np.float16)
    wt_matmul_kernel("f16").interpret(x, wt, y, M, N, K, bm=bm, num_warps=4, stages=stages,
                                      lead=lead, producer=producer, wide_stores=wide)
    ref = x.astype(np.float64) @ wt.astype(np.float64).T
    # f32 accumulation of exact f16 products, then one f16 rounding
    bound = 2.0 ** -11 * np.abs(ref).max() + K * 2.0 ** -24 * np.abs(ref).max()
    assert np.abs(y - ref).max() <= bound


def test_dequant_schedule_and_where_it_is_timed():
    s = dequant_schedule()
    assert str(s) == "wgmma dequant bm=256 bk=64 warps=8 stages=4 lead=2"
    assert s.constants() == {"bm": 256, "bk": 64, "num_warps": 8, "stages": 4, "lead": 2}
    assert s.fits(4096, 128) and s.fits(4096, 32) and s.fits(96, 32)
    assert not s.fits(4096, 48)  # groups of whole 32-row k-tiles
    with pytest.raises(ValueError, match="no shared_weights or prefetch"):
        Schedule(256, 64, 8, wgmma=True, stages=4, lead=2, dequant=True, prefetch=4)
    with pytest.raises(ValueError, match="dequant and half_atoms are the wgmma kernel.s"):
        Schedule(16, dequant=True)
    # Timed for prefill on Hopper while the workspace (W^T in f16) fits the limit.
    assert s in candidates(4096, 12288, 4096, 128, hopper=True)
    assert s in candidates(1024, 8192, 8192, 64, hopper=True)
    assert s not in candidates(256, 12288, 4096, 128, hopper=True)
    assert s not in candidates(4096, 12288, 4096, 128)
    assert dequant_workspace(57344, 8192) == 2 * 57344 * 8192 <= DEQUANT_WORKSPACE_LIMIT
    assert dequant_workspace(40, 64) == 2 * 64 * 64
    big = DEQUANT_WORKSPACE_LIMIT // (2 * 8192) + 32
    assert s not in candidates(4096, big, 8192, 128, hopper=True)
