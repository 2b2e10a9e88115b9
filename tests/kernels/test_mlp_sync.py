"""kernels.mlp_sync: the quantized MLP fused by tile synchronization, in the interpreter
(the specification): gate_up with the silu * up epilogue and down waiting for its rows
agree with a float64 reference, and run together under adversarial interleavings
they give what running them one after the other gives, call after call (the
semaphores never reset)."""

from __future__ import annotations

import numpy as np
import pytest

from tilevm.kernels.mlp_sync import (
    choose_policy,
    down_blocks_per_sm,
    interleave_gate_up,
    mlp_kernels,
    semaphores,
    split_of,
    workspace,
)
from tilevm.kernels.weight_format import FRAGMENTS, pack_weights
from tilevm.kernels.weights import QuantizedWeight
from tilevm.kernels.wgmma_grid import split_range
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


def problem(seed, f=F):
    rng = np.random.default_rng(seed)
    gate, up = rng.integers(0, 16, (H, f)), rng.integers(0, 16, (H, f))
    gate_up = weights(rng, interleave_gate_up(gate, up, BN))
    down = weights(rng, rng.integers(0, 16, (f, H)))
    x = rng.uniform(-1, 1, (M, H)).astype(np.float16)
    return x, gate_up, down


def launches(x, gate_up, down, h, sem, y, generation, policy="row", split_k=1, bk=64,
             f=F):
    make, use = mlp_kernels("f16")
    words, counters = workspace(M, H, CONSTANTS["bm"], BN, split_k)
    ws, counts = np.zeros(max(words, 1), np.float32), np.zeros(max(counters, 1), np.int32)
    constants = dict(CONSTANTS, bk=bk)
    return [(make.specialize(policy=policy, down_split_k=split_k, **constants),
             [x, gate_up.packed, gate_up.scales, gate_up.scales, h, sem, M, 2 * f, H]),
            (use.specialize(producer_bn=BN, policy=policy, split_k=split_k, **constants),
             [h, down.packed, down.scales, down.scales, y, sem, ws, counts, M, H, f,
              generation])]


def buffers(policy="row", split_k=1, bk=64, f=F):
    chunk = CONSTANTS["stages"] * bk  # columns of h a "tile" semaphore covers
    return (np.full((M, f), np.nan, np.float16),
            np.zeros(semaphores(policy, M, f, CONSTANTS["bm"], chunk, split_k), np.int32),
            np.full((M, H), np.nan, np.float16))


def test_the_interleaving_puts_gate_then_up_in_each_tile():
    gate = np.arange(8 * 128).reshape(8, 128)
    both = interleave_gate_up(gate, -gate, BN)
    assert both.shape == (8, 256)
    assert (both[:, :64] == gate[:, :64]).all() and (both[:, 64:128] == -gate[:, :64]).all()
    assert (both[:, 128:192] == gate[:, 64:]).all()
    with pytest.raises(ValueError, match="a multiple of 64"):
        interleave_gate_up(gate[:, :100], gate[:, :100], BN)


@pytest.mark.parametrize("split_k", [1, 3])
def test_the_pair_computes_the_mlp(split_k):
    x, gate_up, down = problem(0)
    h, sem, y = buffers(split_k=split_k)
    for program, args in launches(x, gate_up, down, h, sem, y, 1, split_k=split_k):
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
    assert sem.sum() == 2 * F // BN  # each gate_up tile posted once


# F = 384: three chunks of 128 columns of h (three "tile" semaphores a row; splits of K
# of one or two chunks); bk = 32: chunks of 64 columns, two in F = 128
@pytest.mark.parametrize("policy, split_k, bk, f", [
    ("row", 1, 64, F), ("tile", 1, 64, F), ("row", 2, 64, F), ("row", 3, 64, F),
    ("tile", 1, 32, F), ("row", 2, 64, 384), ("tile", 1, 64, 384), ("tile", 2, 64, 384)])
@pytest.mark.parametrize("seed", range(3))
def test_synchronized_runs_agree_with_serialized_ones(seed, policy, split_k, bk, f):
    x, gate_up, down = problem(seed, f)
    h0, sem0, y0 = buffers(policy, split_k, bk, f)
    for program, args in launches(x, gate_up, down, h0, sem0, y0, 1, policy, split_k, bk, f):
        run(program, args)
    h, sem, y = buffers(policy, split_k, bk, f)
    for generation in (1, 2):
        h[:], y[:] = np.nan, np.nan
        run_together(launches(x, gate_up, down, h, sem, y, generation, policy,
                              split_k, bk, f)[::-1], seed=seed * 10 + generation)
        assert np.array_equal(h, h0) and np.array_equal(y, y0)
    assert sem.sum() == 2 * 2 * f // BN  # every gate_up tile posted once a call


@pytest.mark.parametrize("K, chunk, split_k", [(14336, 256, 4), (1024, 128, 3),
                                               (128, 128, 2), (4096, 256, 7), (64, 256, 1)])
def test_each_column_of_h_posts_to_the_split_that_reads_it(K, chunk, split_k):
    ranges = [split_range(z, K, chunk, split_k) for z in range(split_k)]
    assert ranges[0][0] == 0 and ranges[-1][1] >= K
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # no gap, no overlap
    for column in range(0, K, 64):
        z = split_of(column, K, chunk, split_k)
        assert ranges[z][0] <= column < ranges[z][1], (column, z, ranges)


def test_the_tile_policy_waits_inside_the_loop_and_the_row_policy_once():
    from tilevm.ir.transform import instructions

    _, use = mlp_kernels("f16")
    for policy, waits in (("row", 1), ("tile", None)):
        program = use.specialize(producer_bn=BN, policy=policy, **CONSTANTS)
        found = [i for i in instructions(program.body) if i.opname == "tile_wait"]
        assert len(found) == waits if waits else len(found) > 1
        assert not any(i.opname == "wait_prerequisites" for i in instructions(program.body))


def test_the_policy_is_tile_past_one_wave_of_gate_up_and_row_in_one_or_many():
    from tilevm.cost.hardware import gpu
    from tilevm.cost.model import Resources

    h100, one_block = gpu("h100"), Resources(128, 255, 150_000)  # 1 block per SM
    # 132 SMs hold 132 tiles of 128 rows x 128 columns (64 features of h): F = 8448
    # at M = 128 is exactly one wave
    assert choose_policy(128, 8448, 128, 128, h100, one_block) == "row"
    assert choose_policy(128, 8512, 128, 128, h100, one_block) == "tile"
    assert choose_policy(512, 8448, 128, 128, h100, one_block) == "tile"  # 4 waves
    assert choose_policy(640, 8448, 128, 128, h100, one_block) == "row"  # 5
    two_blocks = Resources(128, 255, 80_000)
    # the 8B MLP (F = 14336): 224 gate_up tiles per 128 rows, 264 at a time
    assert [choose_policy(m, 14336, 128, 128, h100, two_blocks)
            for m in (128, 256, 512, 1024)] == ["row", "tile", "tile", "row"]
    with pytest.raises(Exception, match="policy must be one of"):
        mlp_kernels("f16")[0].specialize(policy="cols", **CONSTANTS)


def test_down_is_capped_at_its_even_share_of_the_sms():
    # 8B down at M = 256: 2 row tiles x 32 column tiles x split_k blocks on 132 SMs
    assert [down_blocks_per_sm(256, 4096, 128, 128, s, 132) for s in (1, 2, 4, 8)] == \
        [1, 1, 2, 4]
    assert down_blocks_per_sm(129, 4096, 128, 128, 1, 64) == 1  # 2 x 32 blocks, 64 SMs
    assert down_blocks_per_sm(129, 4096, 128, 128, 1, 63) == 2


@pytest.mark.gpu
@pytest.mark.parametrize("policy, split_k", [("row", 1), ("tile", 1), ("row", 3),
                                             ("tile", 2)])
def test_gpu_synchronized_mlp_equals_serialized_and_the_reference(policy, split_k):
    """sm_90: the pair on one stream, down a dependent launch (it may start while
    gate_up runs), 20 calls without resetting the semaphores, against the same kernels
    serialized and against float64."""
    from tilevm.backend.cuda import driver
    from tilevm.backend.cuda.device_array import DeviceArray
    from tilevm.backend.launch import compiled_kernel, current_arch

    if current_arch() != "sm_90a":
        pytest.skip("the wgmma kernels need sm_90a")
    rng = np.random.default_rng(7)
    m, h_size, f = 256, 1024, 1024
    gate_up = weights(rng, interleave_gate_up(rng.integers(0, 16, (h_size, f)),
                                              rng.integers(0, 16, (h_size, f)), BN))
    down = weights(rng, rng.integers(0, 16, (f, h_size)))
    x = rng.uniform(-1, 1, (m, h_size)).astype(np.float16)
    config = dict(CONSTANTS, bm=128, stages=4, lead=2, prefetch=2)
    make_kernel, use_kernel = mlp_kernels("f16")
    make = compiled_kernel(make_kernel.specialize(policy=policy, down_split_k=split_k,
                                                  **config))
    use = compiled_kernel(use_kernel.specialize(producer_bn=BN, policy=policy,
                                                split_k=split_k, **config))
    xd = DeviceArray.from_numpy(x)
    wgu, sgu = DeviceArray.from_numpy(gate_up.packed), DeviceArray.from_numpy(gate_up.scales)
    wdn, sdn = DeviceArray.from_numpy(down.packed), DeviceArray.from_numpy(down.scales)
    hd, yd = DeviceArray.zeros((m, f), "f16"), DeviceArray.zeros((m, h_size), "f16")
    sem = DeviceArray.zeros(semaphores(policy, m, f, 128, config["stages"] * config["bk"],
                                       split_k), "int32")
    words, counters = workspace(m, h_size, 128, BN, split_k)
    ws = DeviceArray.zeros(max(words, 1), "f32")
    counts = DeviceArray.zeros(max(counters, 1), "int32")
    stream = driver.call("stream", driver.bindings().cuStreamCreate(1))
    results = []
    for generation in range(1, 21):
        make(xd, wgu, sgu, sgu, hd, sem, m, 2 * f, h_size, stream=stream)
        if generation % 2:  # serialized: a plain launch after gate_up
            use(hd, wdn, sdn, sdn, yd, sem, ws, counts, m, h_size, f, generation,
                stream=stream)
        else:
            launch = use.prepare(hd, wdn, sdn, sdn, yd, sem, ws, counts, m, h_size, f,
                                 generation)
            assert launch.dependent
            launch.launch(int(stream), hd.ptr, wdn.ptr, sdn.ptr, sdn.ptr, yd.ptr, sem.ptr,
                          ws.ptr, counts.ptr)
        driver.call("sync", driver.bindings().cuStreamSynchronize(stream))
        results.append(yd.to_numpy().copy())
    assert all(np.array_equal(r, results[0]) for r in results)
    h = hd.to_numpy().astype(np.float64)
    want = h @ np.asarray(down.dequantize(), np.float64)
    assert np.allclose(results[0].astype(np.float64), want, rtol=2e-3,
                       atol=2e-3 * np.abs(want).max())
