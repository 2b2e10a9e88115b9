"""A program run on the GPU on the interpreter's argument form (numpy arrays and Python
scalars), its outputs copied back, and the kernel's time: `vmc run`'s GPU side, and the
tuner's runner (`tune.runner`), which passes a kernel of its own (a PTX variant).

    device = gpu_device()                        # NoDriverError without a driver or GPU
    result = run_on_gpu(program, args, repeat=100)
    result.outputs                               # `args` after one launch, arrays copied back
    result.time.median_s, result.time.method

Every launch goes on a stream of its own. The first launch gives the outputs; the timed
launches follow on the same device buffers (so a kernel that accumulates into an output
changes only buffers that are no longer read).

The kernel time is the median, over `repeat` launches, of the GPU time between two CUDA
events (the driver's `cuEventRecord`: no PyTorch needed) recorded around each launch.
The launches and their events are queued behind a gate, a stream wait on a flag in host
memory (`cuStreamWaitValue32`), which opens only once they are all queued: the GPU then
runs them back to back, and the events bracket the kernel alone however long the host
takes to submit a launch (tilevm's launch path checks its arguments on the host). Where
the device refuses stream memory operations, the events are recorded as the host
submits, and the time includes the GPU's wait for the host; `KernelTime.method` says
which method timed it.

L2 is warm by default: every launch reads the same inputs. With `cold_l2`, the timed
launches rotate over copies of the arguments that together hold at least
`COLD_L2_FACTOR` times the L2's bytes (as ../shared/BENCHMARKS.md's graph method
rotates the weights), so each launch reads its inputs from DRAM, as a layer of a served
model does; the outputs come from the first copy.
"""

from __future__ import annotations

import ctypes
import gc
import statistics
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilevm.backend.cuda import driver
from tilevm.backend.cuda.errors import CudaError
from tilevm.backend.cuda.kernel import Kernel
from tilevm.backend.launch import compiled_kernel, copy_back, current_arch, to_device
from tilevm.ir.stmt import Program

__all__ = ["GpuDevice", "GpuRun", "KernelTime", "gpu_device", "run_on_gpu", "time_launches",
           "cold_l2_copies"]

# Values of cuda.h's flags (fixed by the driver's ABI).
CU_STREAM_NON_BLOCKING = 1  # no implicit ordering with the legacy default stream
CU_EVENT_DEFAULT = 0  # an event that records time
CU_MEMHOSTALLOC_DEVICEMAP = 2  # pinned host memory the device can read
CU_STREAM_WAIT_VALUE_GEQ = 0  # wait until (int32)(*addr - value) >= 0

WARMUP = 5  # untimed launches first: clocks up, the launch path's caches filled
GATE_BATCH = 64  # launches queued behind one gate: well inside the driver's queue depth
GATE_TIMEOUT_S = 10.0  # the gate opens by itself after this long (see _Gate)
COLD_L2_FACTOR = 3  # the copies rotated over hold this many times the L2's bytes
MAX_COPIES = 64
GATED = "CUDA events around each launch, all queued behind a stream wait (host time excluded)"
UNGATED = "CUDA events around each launch as the host submits it (includes the host's time)"


@dataclass(frozen=True)
class GpuDevice:
    """The current CUDA device: its name and the arch kernels are compiled for."""

    name: str
    arch: str


@dataclass(frozen=True)
class KernelTime:
    """The median GPU time of one launch over `runs` timed launches, and how it was
    measured (`GATED` or `UNGATED`)."""

    median_s: float
    runs: int
    method: str


@dataclass(frozen=True)
class GpuRun:
    """The arguments after the first launch (arrays a non-const pointer points to hold
    the kernel's results), and the kernel time (None when no launch was timed)."""

    outputs: list[Any]
    time: KernelTime | None


def gpu_device() -> GpuDevice:
    """The current device; `NoDriverError` without cuda-python, a driver or a GPU."""
    arch = current_arch()
    return GpuDevice(name=driver.device_name(), arch=arch)


def run_on_gpu(program: Program, args: Sequence[Any], repeat: int = 100,
               kernel: Kernel | None = None, *, cold_l2: bool = False) -> GpuRun:
    """Compile `program` for the current GPU (or take `kernel`, a loaded kernel of it),
    launch it once on `args` (the interpreter's argument form, left untouched) and copy
    its outputs back; then time `repeat` more launches (none when 0), with L2 warm or,
    with `cold_l2`, cold (module docstring). Compiler and launch errors propagate
    (`VMError`, `CudaError`, `ptxas.PTXError`)."""
    if repeat < 0:
        raise ValueError(f"repeat must be >= 0, got {repeat}")
    kernel = kernel or compiled_kernel(program)
    drv = driver.bindings()
    # the user's arrays stay as they are: the outputs are written into copies
    outputs = [value.copy() if isinstance(value, np.ndarray) else value for value in args]
    device_args, copies = to_device(program, outputs)
    rotated = [device_args]
    if cold_l2 and repeat:
        count = cold_l2_copies(sum(v.nbytes for v in args if isinstance(v, np.ndarray)),
                               driver.device_attribute("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE",
                                                       driver.ensure_context().device))
        rotated += [to_device(program, outputs)[0] for _ in range(count - 1)]
    # The copies to the device went through the legacy default stream, with which a
    # non-blocking stream is not ordered: wait for them before launching.
    driver.call("cuCtxSynchronize", drv.cuCtxSynchronize())
    stream = driver.call("cuStreamCreate", drv.cuStreamCreate(CU_STREAM_NON_BLOCKING))
    try:
        launches = 0

        def launch() -> None:
            nonlocal launches
            kernel(*rotated[launches % len(rotated)], stream=stream)
            launches += 1

        launch()
        driver.call("cuStreamSynchronize", drv.cuStreamSynchronize(stream))
        copy_back(copies)
        time = time_launches(launch, stream, repeat) if repeat else None
    finally:
        driver.call("cuStreamSynchronize", drv.cuStreamSynchronize(stream))
        driver.call("cuStreamDestroy", drv.cuStreamDestroy(stream))
    return GpuRun(outputs=outputs, time=time)


def cold_l2_copies(nbytes: int, l2_bytes: int) -> int:
    """How many copies of `nbytes` of arguments hold `COLD_L2_FACTOR` times `l2_bytes`
    (at least 1, at most `MAX_COPIES`)."""
    return max(1, min(MAX_COPIES, -(-COLD_L2_FACTOR * l2_bytes // max(nbytes, 1))))


def time_launches(launch: Callable[[], None], stream: Any, repeat: int) -> KernelTime:
    """The median GPU time of `launch()` (which launches one kernel on `stream`) over
    `repeat` launches, after `WARMUP` untimed ones (see the module docstring)."""
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    drv = driver.bindings()
    for _ in range(WARMUP):
        launch()
    driver.call("cuStreamSynchronize", drv.cuStreamSynchronize(stream))
    gate: _Gate | None = _Gate.open_or_none(stream)
    events = [(_event(drv), _event(drv)) for _ in range(repeat)]
    method = GATED if gate is not None else UNGATED
    try:
        for first in range(0, repeat, GATE_BATCH):
            batch = events[first:first + GATE_BATCH]
            if gate is not None:
                gate.close()
            gc_was_enabled = gc.isenabled()
            gc.disable()  # no device memory freed while the gate holds the stream
            try:
                for start, end in batch:
                    driver.call("cuEventRecord", drv.cuEventRecord(start, stream))
                    launch()
                    driver.call("cuEventRecord", drv.cuEventRecord(end, stream))
            finally:
                if gate is not None and not gate.release():
                    method = UNGATED  # the timeout opened it before all were queued
                if gc_was_enabled:
                    gc.enable()
            driver.call("cuStreamSynchronize", drv.cuStreamSynchronize(stream))
        elapsed = _elapsed_time_function(drv)
        times = [driver.call("cuEventElapsedTime", elapsed(start, end)) / 1e3
                 for start, end in events]
    finally:
        driver.call("cuStreamSynchronize", drv.cuStreamSynchronize(stream))
        for pair in events:
            for event in pair:
                driver.call("cuEventDestroy", drv.cuEventDestroy(event))
        if gate is not None:
            gate.free()
    return KernelTime(median_s=float(statistics.median(times)), runs=repeat, method=method)


def _event(drv: Any) -> Any:
    return driver.call("cuEventCreate", drv.cuEventCreate(CU_EVENT_DEFAULT))


def _elapsed_time_function(drv: Any) -> Callable[[Any, Any], Any]:
    # CUDA 12.8 added cuEventElapsedTime_v2; bindings for CUDA 13 may name only that one.
    return getattr(drv, "cuEventElapsedTime", None) or drv.cuEventElapsedTime_v2


class _Gate:
    """A stream wait on a 32-bit flag in pinned host memory: `close()` queues a wait for
    the next value of the flag, `release()` writes it. So that a host thread blocked on
    the device while the gate is closed cannot hang the process, a timer writes the flag
    after `GATE_TIMEOUT_S`; `release` then reports that the gate opened early."""

    def __init__(self, stream: Any, host_ptr: int, device_ptr: Any) -> None:
        self.stream = stream
        self.host_ptr = host_ptr
        self.device_ptr = device_ptr
        self.flag = ctypes.c_uint32.from_address(host_ptr)
        self.flag.value = 0
        self.generation = 0
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    @classmethod
    def open_or_none(cls, stream: Any) -> _Gate | None:
        """A gate on `stream`, or None where the device refuses stream waits (then
        nothing of it stays allocated)."""
        drv = driver.bindings()
        try:
            host_ptr = int(driver.call("cuMemHostAlloc", drv.cuMemHostAlloc(
                4, CU_MEMHOSTALLOC_DEVICEMAP)))
        except CudaError:
            return None
        try:
            device_ptr = driver.call("cuMemHostGetDevicePointer",
                                     drv.cuMemHostGetDevicePointer(host_ptr, 0))
            gate = cls(stream, host_ptr, device_ptr)
            gate.close()  # a first wait on a value already written: does the device wait?
            gate.release()
            driver.call("cuStreamSynchronize", drv.cuStreamSynchronize(stream))
            return gate
        except (CudaError, AttributeError, TypeError):  # no stream memory operations
            driver.call("cuMemFreeHost", drv.cuMemFreeHost(host_ptr))
            return None

    def close(self) -> None:
        drv = driver.bindings()
        self.generation += 1
        driver.call("cuStreamWaitValue32", drv.cuStreamWaitValue32(
            self.stream, self.device_ptr, self.generation, CU_STREAM_WAIT_VALUE_GEQ))
        self._timer = threading.Timer(GATE_TIMEOUT_S, self._write)
        self._timer.daemon = True
        self._timer.start()

    def _write(self) -> None:
        with self._lock:
            self.flag.value = self.generation

    def release(self) -> bool:
        """Open the gate; False when the timer had opened it already."""
        assert self._timer is not None
        self._timer.cancel()
        with self._lock:
            in_time = self.flag.value != self.generation
            self.flag.value = self.generation
        return in_time

    def free(self) -> None:
        drv = driver.bindings()
        driver.call("cuMemFreeHost", drv.cuMemFreeHost(self.host_ptr))
