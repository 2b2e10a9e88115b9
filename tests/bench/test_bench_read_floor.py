"""`tilevm.bench.read_floor`: the read-only kernel reads every word it is given (its XOR
per thread against numpy, in the interpreter and on the GPU), and the floor's timing."""

from __future__ import annotations

import numpy as np
import pytest

from tilevm.backend.launch import compiled_kernel
from tilevm.bench import read_floor
from tilevm.bench.read_floor import expected_xor, stream_read
from tilevm.bench.timing import Timer

STEP = read_floor.THREADS * read_floor.WORDS


@pytest.mark.parametrize("n, chunk, unroll", [(2 * 2 * STEP, 2 * STEP, 2),
                                              (3 * 4 * STEP - 5, 4 * STEP, 4)])
def test_stream_read_folds_every_word_of_its_chunk(n, chunk, unroll):
    # (the second: a ragged last block, whose words past n read as 0)
    rng = np.random.default_rng(n)
    src = rng.integers(-2**31, 2**31, size=n, dtype=np.int64).astype(np.int32)
    want = expected_xor(src, chunk)
    out = np.zeros(want.size, dtype=np.int32)
    stream_read.interpret(src, out, n, out.size, chunk=chunk, unroll=unroll)
    np.testing.assert_array_equal(out, want)


def test_with_out_len_zero_it_writes_nothing():
    src = np.arange(2 * STEP, dtype=np.int32) + 1
    out = np.full(STEP, 7, dtype=np.int32)
    stream_read.interpret(src, out, src.size, 0, chunk=2 * STEP, unroll=2)
    assert (out == 7).all()


def test_expected_xor_is_the_xor_of_each_thread_words_steps():
    src = np.arange(1, 3 * STEP + 1, dtype=np.int32)
    got = expected_xor(src, 3 * STEP)
    j = 17
    assert got[j] == src[j] ^ src[STEP + j] ^ src[2 * STEP + j]


def test_chunks_that_do_not_hold_whole_unrolled_steps_are_refused():
    with pytest.raises(Exception, match="multiple of"):
        stream_read.specialize(chunk=STEP * 3, unroll=2)


@pytest.mark.gpu
def test_on_the_gpu_it_matches_numpy_and_the_floor_is_timed():
    import torch


    chunk, unroll = read_floor.CONFIGS[0]
    n = 5 * chunk - 3
    rng = np.random.default_rng(0)
    host = rng.integers(-2**31, 2**31, size=n, dtype=np.int64).astype(np.int32)
    want = expected_xor(host, chunk)
    out = torch.zeros(want.size, dtype=torch.int32, device="cuda")
    compiled_kernel(stream_read.specialize(chunk=chunk, unroll=unroll))(
        torch.from_numpy(host).cuda(), out, n, out.numel())
    np.testing.assert_array_equal(out.cpu().numpy(), want)

    floor = read_floor.read_floor_seconds(Timer(min_reps=20), 8 << 20)
    assert (floor["chunk"], floor["unroll"]) in read_floor.CONFIGS
    assert floor["bytes"] == 8 << 20
    # 8 MB: at most 4 TB/s (an H100's DRAM peak is 3.35) and at least 0.1 TB/s
    assert 8e6 / 4e12 < floor["seconds"] < 8e6 / 1e11
