"""The read floor: how long the fastest kernel we have takes to only read B bytes, timed
the way `bench.qmm` times the matmuls (same `bench.timing.Timer`, same L2 flush).

A decode matmul must read its weights; under the benchmark's timer it also pays what
any launch pays there (the events around an empty kernel, the first reads' latency, the
last wave's tail) and, with the write flush, the write-back of the dirty lines the
flush left in L2. The roofline (`bytes / copy_bw`) counts none of that. So for each
cell `t_roof / t_floor` is the fraction of the roofline that a kernel reading those
bytes and doing nothing else reached on this GPU under this timer: where it is under a
target, no matmul kernel we know of can meet the target there (only one that reads the
bytes faster than this floor). `t_floor / t` says how close a kernel is to that floor.

`stream_read` is a VM program: each of its 256 threads loads 16 bytes a step, `unroll`
steps in flight, and folds them into a running XOR; a block reads `chunk` contiguous
int32 words. Its result (each thread's XOR) is stored only where `out_len` allows:
timed with `out_len = 0`, it writes nothing (the compiler cannot know that, so every
load stays), and a test checks it with `out_len` set against numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tilevm.backend.launch import compiled_kernel
from tilevm.bench.timing import Timer
from tilevm.layouts import spatial
from tilevm.vm import lang as tv

THREADS = 256
WORDS = 4  # int32 words a thread loads per step: 16 bytes
# (chunk, unroll) pairs timed, the fastest counting: a block's int32 words and loads in
# flight a thread. Small chunks lead: more, smaller blocks read faster than few large ones.
CONFIGS = ((2048, 2), (4096, 4), (8192, 8), (4096, 2))


@tv.kernel(num_warps=8)
def stream_read(src: tv.ptr(tv.int32, const=True), out: tv.ptr(tv.int32),
                n: tv.int32, out_len: tv.int32, *, chunk: int = 16384, unroll: int = 4):
    step = THREADS * WORDS
    tv.grid(tv.cdiv(n, chunk))
    layout = spatial(THREADS).local(WORDS)
    begin = tv.block_idx(0) * chunk
    gsrc = tv.global_view(src, [n])  # words past n read as 0
    tv.static_assert(chunk % (step * unroll) == 0,
                     f"chunk={chunk} must be a multiple of {step * unroll} words")
    acc = tv.zeros([step], tv.int32, layout=layout)
    for i in tv.range(0, chunk, step * unroll):
        # `unroll` loads issued before any is used: that many in flight a thread
        loaded = [tv.load_global(gsrc, [begin + i + u * step], [step], layout=layout)
                  for u in range(unroll)]
        for words in loaded:
            acc = acc ^ words
    gout = tv.global_view(out, [out_len])
    tv.store_global(gout, acc, [tv.block_idx(0) * step])


def expected_xor(src: np.ndarray, chunk: int) -> np.ndarray:
    """What `stream_read` stores with `out_len` covering every block: for block b and
    thread-word j of a step, the XOR of the words `b * chunk + i * step + j`."""
    step = THREADS * WORDS
    blocks = -(-src.size // chunk)
    padded = np.zeros(blocks * chunk, dtype=np.int32)
    padded[:src.size] = src
    return np.bitwise_xor.reduce(padded.reshape(blocks, chunk // step, step), axis=1).ravel()


def read_floor_seconds(timer: Timer, nbytes: int) -> dict[str, Any]:
    """The fastest of `stream_read`'s `CONFIGS` reading `nbytes` (rounded up to whole
    16-byte words) from a fresh random buffer on the GPU, timed by `timer`:
    {"seconds", "chunk", "unroll", "bytes"}."""
    import torch

    n = -(-nbytes // 16) * 4
    src = torch.randint(-2**31, 2**31 - 1, (n,), dtype=torch.int32, device="cuda")
    out = torch.empty(1, dtype=torch.int32, device="cuda")
    best: dict[str, Any] | None = None
    for chunk, unroll in CONFIGS:
        launch = compiled_kernel(stream_read.specialize(chunk=chunk, unroll=unroll))
        seconds = timer(lambda launch=launch: launch(src, out, n, 0))[0]
        if best is None or seconds < best["seconds"]:
            best = {"seconds": seconds, "chunk": chunk, "unroll": unroll, "bytes": 4 * n}
    assert best is not None
    return best  # (the buffer is freed on return)
