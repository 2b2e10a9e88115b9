"""`gpu_run.time_launches` against a simulated driver: a stream that runs its commands in
order on a simulated clock, where the host needs `HOST_S` to submit a launch and the
kernel runs `KERNEL_S`. Behind the gate the events bracket the kernel alone; without
stream waits (the device refuses them) the time includes the host's submission, and
the method says so. The simulation also fails any stream synchronization while the gate
holds the stream (a deadlock on a real device). The real driver: tests/test_cli_run.py
on a GPU."""

from __future__ import annotations

import ctypes
import time

import pytest

from tilevm.backend import gpu_run
from tilevm.backend.cuda import driver

HOST_S = 50e-6
KERNEL_S = 3e-6
NOT_SUPPORTED = 801


class SimulatedDriver:
    class CUresult:
        CUDA_SUCCESS = 0

    def __init__(self, stream_waits: bool = True) -> None:
        self.stream_waits = stream_waits
        self.host_clock = 0.0
        self.device_clock = 0.0
        self.queue: list[tuple[str, object, float]] = []  # (kind, payload, submitted at)
        self.event_times: dict[int, float] = {}
        self.events_alive: set[int] = set()
        self.flag = ctypes.c_uint32(0)
        self.host_memory_live = False
        self.kernels_run = 0

    # the device: runs queued commands until a wait whose value is not yet written
    def _run(self) -> None:
        while self.queue:
            kind, payload, submitted = self.queue[0]
            if kind == "wait":
                if self.flag.value < payload:
                    return
                # the wait is seen as satisfied now: the host wrote the flag before this call
                self.device_clock = max(self.device_clock, self.host_clock)
            elif kind == "event":
                self.device_clock = max(self.device_clock, submitted)
                self.event_times[payload] = self.device_clock
            else:
                self.device_clock = max(self.device_clock, submitted) + KERNEL_S
                self.kernels_run += 1
            self.queue.pop(0)

    def launch(self) -> None:
        self._run()
        self.host_clock += HOST_S  # the host's work to submit one launch
        self.queue.append(("kernel", None, self.host_clock))

    # the driver calls time_launches makes
    def cuStreamSynchronize(self, stream):
        self._run()
        assert not self.queue, "synchronized a stream held by a closed gate: a deadlock"
        return (0,)

    def cuEventCreate(self, flags):
        handle = len(self.event_times) + len(self.events_alive) + 1000
        self.events_alive.add(handle)
        return (0, handle)

    def cuEventDestroy(self, event):
        self.events_alive.remove(event)
        return (0,)

    def cuEventRecord(self, event, stream):
        self._run()
        self.queue.append(("event", event, self.host_clock))
        return (0,)

    def cuEventElapsedTime(self, start, end):
        return (0, (self.event_times[end] - self.event_times[start]) * 1e3)  # ms

    def cuMemHostAlloc(self, size, flags):
        assert size >= 4 and flags == gpu_run.CU_MEMHOSTALLOC_DEVICEMAP
        self.host_memory_live = True
        return (0, ctypes.addressof(self.flag))

    def cuMemHostGetDevicePointer(self, host, flags):
        return (0, host)

    def cuMemFreeHost(self, host):
        self.host_memory_live = False
        return (0,)

    def cuStreamWaitValue32(self, stream, address, value, flags):
        if not self.stream_waits:
            return (NOT_SUPPORTED,)
        assert address == ctypes.addressof(self.flag)
        assert flags == gpu_run.CU_STREAM_WAIT_VALUE_GEQ
        self._run()
        self.queue.append(("wait", value, self.host_clock))
        return (0,)

    def cuGetErrorName(self, err):
        return (0, b"CUDA_ERROR_NOT_SUPPORTED")

    def cuGetErrorString(self, err):
        return (0, b"operation not supported")


@pytest.fixture
def simulated(monkeypatch):
    def install(**options) -> SimulatedDriver:
        drv = SimulatedDriver(**options)
        monkeypatch.setattr(driver, "bindings", lambda: drv)
        return drv
    return install


@pytest.mark.parametrize("repeat", [1, 100])  # 100: two batches behind the gate
def test_gated_events_bracket_the_kernel_alone(simulated, repeat):
    drv = simulated()
    timed = gpu_run.time_launches(drv.launch, stream=7, repeat=repeat)
    assert timed.method == gpu_run.GATED and timed.runs == repeat
    assert timed.median_s == pytest.approx(KERNEL_S)
    assert drv.kernels_run == gpu_run.WARMUP + repeat
    assert not drv.events_alive and not drv.host_memory_live  # everything freed


def test_without_stream_waits_the_host_time_counts_and_is_named(simulated):
    drv = simulated(stream_waits=False)
    timed = gpu_run.time_launches(drv.launch, stream=7, repeat=9)
    assert timed.method == gpu_run.UNGATED and "includes the host" in timed.method
    # the host's period between launches, not the kernel's 3 us
    assert timed.median_s == pytest.approx(HOST_S)
    assert not drv.events_alive and not drv.host_memory_live


def test_a_host_stuck_behind_the_gate_is_released_by_the_timeout(simulated, monkeypatch):
    # A launch that waits for the device while the gate is closed would hang; the gate's
    # timer opens it, and the time is then reported as not host-free.
    drv = simulated()
    monkeypatch.setattr(gpu_run, "GATE_TIMEOUT_S", 0.05)
    launches = 0

    def stuck_once() -> None:
        nonlocal launches
        launches += 1
        drv.launch()
        if launches == gpu_run.WARMUP + 2:  # the second timed launch: wait for the flag
            deadline = time.monotonic() + 5
            while drv.flag.value < _generation(drv):
                assert time.monotonic() < deadline, "the gate's timer did not open it"

    timed = gpu_run.time_launches(stuck_once, stream=7, repeat=3)
    assert timed.method == gpu_run.UNGATED


def _generation(drv: SimulatedDriver) -> int:
    waits = [payload for kind, payload, _ in drv.queue if kind == "wait"]
    return int(waits[-1]) if waits else 0


def test_repeat_must_be_positive():
    with pytest.raises(ValueError, match="repeat"):
        gpu_run.time_launches(lambda: None, stream=0, repeat=0)
