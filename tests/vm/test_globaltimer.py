"""`tv.globaltimer()`: the GPU's nanosecond timer as a block-wide int64 scalar, for a
timeline of a kernel's blocks. In the interpreter it counts the block's instructions
(deterministic); in the PTX one thread reads `%globaltimer` and hands it to the block;
on an H100, readings around a block's work increase and a launch's blocks read close
times."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import compile_once

from tilevm.ir.errors import VMError
from tilevm.ir.parser import parse_program
from tilevm.ir.printer import format_program
from tilevm.ir.verifier import verify
from tilevm.vm import lang as tv
from tilevm.vm.interpreter import run


@tv.kernel(num_warps=4)
def timed_double(t: tv.ptr(tv.int32), x: tv.ptr(tv.f32), N: tv.int32):
    """Doubles block b's 128 elements of x; t[b] = (the time it took, its start in ns
    within the current second)."""
    tv.grid(N)
    start = tv.globaltimer()
    g = tv.global_view(x, [N * 128])
    tv.store_global(g, tv.load_global(g, [tv.block_idx(0) * 128], [128]) * 2.0,
                    [tv.block_idx(0) * 128])
    took = tv.globaltimer() - start
    gt = tv.global_view(t, [N, 2])
    tv.store_global(gt, tv.full([1, 1], took, tv.int32), [tv.block_idx(0), 0])
    tv.store_global(gt, tv.full([1, 1], start % 1000000000, tv.int32), [tv.block_idx(0), 1])


def test_the_interpreter_counts_the_blocks_instructions():
    t = np.zeros((3, 2), np.int32)
    x = np.arange(3 * 128, dtype=np.float32)
    run(timed_double.specialize(), [t, x, 3])
    assert np.array_equal(x, 2 * np.arange(3 * 128, dtype=np.float32))
    # the first reading is instruction 1; the second comes 5 instructions later
    assert (t[:, 0] == 5).all() and (t[:, 1] == 1).all()


def test_the_text_form_and_the_verifier():
    program = timed_double.specialize()
    text = format_program(program)
    assert "let start: int64 = globaltimer" in text
    assert format_program(parse_program(text)) == text
    with pytest.raises(VMError, match="globaltimer: out must be an int64 scalar variable"):
        verify(parse_program(text.replace("let start: int64 = globaltimer",
                                          "let start: int32 = globaltimer")))


def test_one_thread_reads_the_timer_and_hands_it_to_the_block():
    ptx = compile_once(timed_double.specialize(), "sm_90a").ptx
    assert ptx.count("%globaltimer;") == 2
    assert ptx.count("bar.sync") >= 4  # before and after each hand-over


@pytest.mark.gpu
def test_gpu_the_timer_runs_forward_and_a_launchs_blocks_read_close_times():
    from tilevm.backend.launch import launch_program

    N = 264
    t = np.zeros((N, 2), np.int32)
    x = np.ones(N * 128, np.float32)
    launch_program(timed_double.specialize(), [t, x, N])
    assert (x == 2.0).all()
    assert (t[:, 0] > 0).all() and (t[:, 0] < 1_000_000).all()  # under 1 ms a block
    starts = np.sort(t[:, 1].astype(np.int64))
    spread = min(starts[-1] - starts[0], starts[0] + 10**9 - starts[-1])  # (a second's wrap)
    assert 0 <= spread < 1_000_000
