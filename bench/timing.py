"""The benchmarks' timers. `Timer`: the median kernel time of a launch, L2 flushed before
every timed run, behind a GPU sleep so that the host's submission time is not counted
(the "isolated" method); `bench.qmm` times the matmuls with it, `bench.read_floor` the
read-only kernel. `graph_seconds` and `graph_per_call`: the graph method of
../shared/BENCHMARKS.md (calls captured in a CUDA graph, replays timed).
`gpu_unavailable_reason`: why this process cannot time anything, for the benchmarks that
then write a report saying so."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

MIN_REPS = 100
FLUSH_BYTES = 256 << 20
SLEEP_S = 100e-6  # the GPU sleep before every timed run's flush (Timer)
L2_FLUSHES = ["write", "read"]
GRAPH_CALLS = 60  # calls a graph holds (the graph method)


def gpu_unavailable_reason() -> str | None:
    """Why this process cannot run a benchmark (no torch, no CUDA device), or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (the benchmarks launch on torch CUDA tensors)"
    try:
        if not torch.cuda.is_available():
            return "no CUDA device (torch.cuda.is_available() is False)"
    except Exception as err:  # a broken driver install
        return f"CUDA is not usable: {type(err).__name__}: {err}"
    return None


class Timer:
    """Median kernel time in seconds, L2 flushed before every timed run.

    Every run is timed with CUDA events behind a GPU sleep (`torch.cuda._sleep`, at
    least `SLEEP_S` and twice the host's submission time): the sleep keeps the GPU busy
    until the flush, the events and the launch are queued, so the events bracket the
    kernel alone, however long the host takes to submit it (tilevm's Python launch path
    checks its arguments). `triton.testing.do_bench` serves only where torch has no
    sleep: it records its events around the launch right after its flush, so a launch
    that takes the host longer than the flush counts the GPU's idle wait as the
    kernel's. Every run of one table uses the same method, so its cells compare.

    `l2_flush`: how L2 is emptied. "write" zeroes a 256 MB buffer (do_bench's own flush).
    That leaves L2 full of dirty lines, which the timed kernel's reads then evict and
    the memory writes back during its run: a kernel reading B bytes also pays for up to
    min(B, L2) bytes written (docs/quantized-matmul.md has the measured cost). "read"
    sums the buffer instead (every run timed with events), which evicts as well and leaves the
    lines clean: the kernel moves only its own bytes, as in a serving loop whose
    previous kernel read its weights, and as the roofline counts them."""

    def __init__(self, min_reps: int = MIN_REPS, l2_flush: str = "write") -> None:
        import torch

        if l2_flush not in L2_FLUSHES:
            raise ValueError(f"l2_flush must be one of {', '.join(L2_FLUSHES)}, got "
                             f"{l2_flush!r}")
        self.min_reps = min_reps
        self.l2_flush = l2_flush
        flush = f"{FLUSH_BYTES >> 20} MB L2 flush per run ({l2_flush})"
        self._do_bench: Callable | None = None
        self.method = (f"CUDA events behind a GPU sleep of at least {SLEEP_S * 1e6:.0f} us, "
                       f"median, {flush}")
        if l2_flush == "write" and not hasattr(torch.cuda, "_sleep"):
            try:
                from triton.testing import do_bench
                self._do_bench = do_bench
                self.method = "triton.testing.do_bench(return_mode='median'), L2 flushed " \
                              "per run (no GPU sleep in this torch)"
            except Exception:  # no Triton: CUDA events and our own flush
                pass
        # Writing (or reading) this buffer evicts everything else from L2 (50 MB on an
        # H100).
        self._flush_buffer = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def flush(self) -> None:
        """Empty L2 (see the class docstring)."""
        if self.l2_flush == "write":
            self._flush_buffer.zero_()
        else:
            self._flush_buffer.sum()

    @staticmethod
    def _gpu_seconds(fn: Callable[[], Any], n: int) -> float:
        import torch

        fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / n / 1e3

    def _estimate(self, fn: Callable[[], Any]) -> tuple[float, float]:
        """(seconds per flushed run, host seconds to submit one launch), after a warm-up."""
        import torch

        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):  # no sync in between: the host's submission cost alone
            fn()
        host = (time.perf_counter() - t0) / 5
        torch.cuda.synchronize()

        def flushed():
            self.flush()
            fn()

        return self._gpu_seconds(flushed, 3), host

    def __call__(self, fn: Callable[[], Any]) -> tuple[float, int, str]:
        """(median seconds, number of timed runs, method: "do_bench" or "events")."""
        est, host = self._estimate(fn)
        est = max(est, 1e-6)
        if self._do_bench is not None:  # (torch has no GPU sleep)
            # do_bench runs rep / (its own estimate of one flushed run) times: ask for
            # enough milliseconds that this is at least min_reps (+10% margin).
            rep_ms = max(100.0, 1.1 * self.min_reps * est * 1e3)
            ms = self._do_bench(fn, warmup=25, rep=rep_ms, return_mode="median")
            return ms / 1e3, max(self.min_reps, int(rep_ms / (est * 1e3))), "do_bench"
        return (*self._events(fn, est, host), "events")

    def _events(self, fn: Callable[[], Any], est: float, host: float) -> tuple[float, int]:
        import torch

        reps = max(self.min_reps, min(1000, int(0.1 / est)))
        for _ in range(max(3, min(100, int(0.025 / est)))):  # warm-up: clocks, driver
            fn()
        # Sleep twice the host's submission time, and at least SLEEP_S, so that every
        # kernel a table compares starts after the same idle time (at ~2 GHz; a slower
        # clock sleeps longer).
        cycles = int(max(2 * host, SLEEP_S) * 2e9)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        sleep = getattr(torch.cuda, "_sleep", lambda cycles: None)
        for s, e in zip(starts, ends):
            sleep(cycles)
            self.flush()
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) / 1e3, reps


def graph_seconds(enqueue: Callable[[], None], torch: Any, replays: int = 5) -> float:
    """Median seconds of one replay of a CUDA graph holding what `enqueue` issues on the
    current stream (run once first, outside the graph, to warm)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        enqueue()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        enqueue()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1e-3)
    return statistics.median(times)


def graph_per_call(calls: Sequence[Callable[[], Any]], torch: Any) -> float:
    """The graph method: seconds per call of `calls` (the same call on each of R copies
    of its weights), `GRAPH_CALLS // R` rounds of them captured in one graph."""
    rounds = max(1, GRAPH_CALLS // len(calls))

    def enqueue() -> None:
        for _ in range(rounds):
            for call in calls:
                call()

    return graph_seconds(enqueue, torch) / (rounds * len(calls))
