"""Candidates run in a child process, behind a watchdog: a candidate that faults, hangs
or fails to load is marked invalid, and the search goes on.

    outcomes = run_candidates([Candidate(program), Candidate(program, ptx=variant)],
                              inputs=[args0, args1], repeat=20, timeout_s=30)
    outcomes[1].error or outcomes[1].outputs == outcomes[0].outputs

Why a child: a kernel whose instruction order or control bits were edited carelessly
does not give wrong numbers so much as it kills the CUDA context (an illegal instruction
or address); everything the process held on the GPU is then lost. A worker process
(`python -m tilevm.tune.runner`, given the caller's `sys.path`) receives the inputs
once (each named set of them, the first time a candidate names it) and then one
candidate at a time over a pipe; it answers with the outputs (the
bytes of every array the kernel writes, per input set) and the median kernel time on
the first input set (`backend.gpu_run`), with L2 cold by default: the launches rotate
over copies of the inputs larger than L2, as ../shared/BENCHMARKS.md times a layer.
After a CUDA error the worker exits, and one that does not answer within `timeout_s` is
killed; either way the candidate is invalid and a new worker takes the next one.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import select
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from tilevm.backend.gpu_run import run_on_gpu
from tilevm.backend.launch import compiled_kernel
from tilevm.backend.prebuild import worker_environment
from tilevm.ir.stmt import Program
from tilevm.ir.types import Pointer
from tilevm.tune.variants import machine_code_variant, ptx_variant

__all__ = ["Candidate", "Outcome", "Runner", "run_candidates"]


@dataclass(frozen=True)
class Candidate:
    """A kernel to run: `program` compiled as usual, or loaded from `ptx` (a variant of
    its compiled PTX, `tune.variants`) or from `cubin` (machine code of it, edited), on
    the runner's input sets named `inputs` ("" the runner's own; others registered with
    `Runner.add_inputs`: schedules of one kernel may take other arguments)."""

    program: Program
    ptx: str | None = None
    inputs: str = ""
    cubin: bytes | None = None


@dataclass(frozen=True)
class Outcome:
    """What a candidate did: per input set, the SHA-256 (hex) of the bytes of each array
    it writes (`outputs`), its median kernel time in seconds on the first input set
    (None when not timed), or why it is invalid (`error`)."""

    outputs: tuple[tuple[str, ...], ...] | None = None
    seconds: float | None = None
    error: str | None = None
    arrays: tuple[tuple[Any, ...], ...] | None = None  # the written arrays, if kept

    @property
    def valid(self) -> bool:
        return self.error is None


def run_candidates(candidates: Sequence[Candidate], inputs: Sequence[Sequence[Any]], *,
                   repeat: int = 20, timeout_s: float = 60.0, cold_l2: bool = True
                   ) -> list[Outcome]:
    """Each candidate's outcome on every input set (the interpreter's argument form:
    numpy arrays and Python scalars; left untouched), in order; `repeat` timed launches
    on the first set (0: not timed); `timeout_s` for one candidate, its load included."""
    with Runner(inputs, repeat=repeat, timeout_s=timeout_s, cold_l2=cold_l2) as runner:
        return [runner.run(candidate) for candidate in candidates]


class Runner:
    """Candidates run one at a time on fixed inputs (`run`), in a worker process that
    is replaced after a failure; close it (or use `with`) to end the worker. `cold_l2`:
    time with L2 cold (module docstring), else warm; `launcher`: a command the worker
    runs under (compute-sanitizer, `tune.verify`); `grace_s`: how long a worker that
    failed a candidate may take to exit by itself before it is killed (a launcher may
    still be writing its report)."""

    def __init__(self, inputs: Sequence[Sequence[Any]], *, repeat: int = 20,
                 timeout_s: float = 60.0, cold_l2: bool = True,
                 launcher: Sequence[str] = (), grace_s: float = 0.0) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if repeat < 0:
            raise ValueError(f"repeat must be >= 0, got {repeat}")
        self.inputs: dict[str, list[list[Any]]] = {"": [list(args) for args in inputs]}
        self.repeat, self.timeout_s, self.cold_l2 = repeat, timeout_s, cold_l2
        self.launcher, self.grace_s = list(launcher), grace_s
        self._worker: _Worker | None = None

    def add_inputs(self, name: str, inputs: Sequence[Sequence[Any]]) -> None:
        """Input sets that candidates name by `name` (`Candidate.inputs`)."""
        if name in self.inputs:
            raise ValueError(f"input sets {name!r} are registered already")
        self.inputs[name] = [list(args) for args in inputs]

    def discard_inputs(self, name: str) -> None:
        """Forget the input sets `name` (the worker keeps only the newest anyway)."""
        del self.inputs[name]

    def run(self, candidate: Candidate, *, keep_arrays: bool = False) -> Outcome:
        """The candidate's outcome; with `keep_arrays` it carries the written arrays
        themselves (`Outcome.arrays`), not only their digests."""
        if candidate.inputs not in self.inputs:
            raise ValueError(f"no input sets named {candidate.inputs!r}: register them "
                             f"with add_inputs")
        if self._worker is None:
            self._worker = _Worker(self.launcher)
        outcome = self._worker.run(candidate, self.inputs[candidate.inputs],
                                   (self.repeat, self.cold_l2, keep_arrays),
                                   self.timeout_s)
        if outcome.error is not None:  # the worker is gone or unusable: a new one next
            self._worker.close(self.grace_s)
            self._worker = None
        return outcome

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def finish(self, timeout_s: float) -> int | None:
        """End the worker as a normal exit (its input closed) and return its exit status,
        None if there was none running or it did not exit within `timeout_s` (killed)."""
        worker, self._worker = self._worker, None
        return None if worker is None else worker.finish(timeout_s)

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Worker:
    def __init__(self, launcher: list[str]) -> None:
        self.process = subprocess.Popen(
            [*launcher, sys.executable, "-m", "tilevm.tune.runner"],
            env=worker_environment(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.sent: list[str] = []  # the names of the input sets the worker holds

    def run(self, candidate: Candidate, inputs: list[list[Any]],
            how: tuple[int, bool, bool], timeout_s: float) -> Outcome:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            if candidate.inputs not in self.sent:
                _send(self.process.stdin, ("inputs", (candidate.inputs, inputs)))
                self.sent = _kept(self.sent, candidate.inputs)
            _send(self.process.stdin, ("run", (candidate, how)))
        except (BrokenPipeError, OSError):
            return Outcome(error="the runner process died before the candidate was sent")
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        if not ready:
            return Outcome(error=f"timeout: no answer within {timeout_s:g} s (a hang?)")
        reply = _receive(self.process.stdout)
        if reply is None:
            return Outcome(error=f"the runner process died (exit status "
                                 f"{self.process.poll()})")
        kind, payload = reply
        if kind == "error":
            return Outcome(error=payload)
        outputs, seconds, arrays = payload
        return Outcome(outputs=outputs, seconds=seconds, arrays=arrays)

    def finish(self, timeout_s: float) -> int | None:
        assert self.process.stdin is not None
        self.process.stdin.close()  # the worker's loop ends: a normal exit
        try:
            status = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            status = None
        self.close()
        return status

    def close(self, grace_s: float = 0.0) -> None:
        if grace_s > 0:
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


KEPT_INPUTS = 2  # named input sets a worker holds at once (each may be gigabytes)


def _kept(names: list[str], new: str) -> list[str]:
    """The names held after `new` arrives: the newest `KEPT_INPUTS` (the worker and its
    parent apply the same rule, so the parent knows what to send again)."""
    return [*names, new][-KEPT_INPUTS:]


def _send(pipe: BinaryIO, message: object) -> None:
    data = pickle.dumps(message)
    pipe.write(struct.pack("<Q", len(data)) + data)
    pipe.flush()


def _receive(pipe: BinaryIO) -> Any:
    header = pipe.read(8)
    if len(header) < 8:
        return None
    (size,) = struct.unpack("<Q", header)
    data = pipe.read(size)
    return pickle.loads(data) if len(data) == size else None


def _run_one(candidate: Candidate, inputs: list[list[Any]], repeat: int, cold_l2: bool,
             keep_arrays: bool) -> tuple[Any, float | None, Any]:
    """(In the worker.) The outputs' digests, the time and the written arrays (None
    unless kept) of one candidate."""
    program = candidate.program
    if candidate.cubin is not None:
        kernel = machine_code_variant(program, candidate.cubin)
    elif candidate.ptx is not None:
        kernel = ptx_variant(program, candidate.ptx)
    else:
        kernel = compiled_kernel(program)
    written = [i for i, p in enumerate(program.params)
               if isinstance(p, Pointer) and not p.type.readonly]
    outputs, seconds, arrays = [], None, []
    for k, args in enumerate(inputs):
        run = run_on_gpu(program, args, repeat=repeat if k == 0 else 0, kernel=kernel,
                         cold_l2=cold_l2)
        outputs.append(tuple(hashlib.sha256(run.outputs[i].tobytes()).hexdigest()
                             for i in written))
        arrays.append(tuple(run.outputs[i] for i in written))
        if k == 0 and run.time is not None:
            seconds = run.time.median_s
    return tuple(outputs), seconds, tuple(arrays) if keep_arrays else None


def _serve() -> None:
    """The worker: answer candidates until the pipe closes or a CUDA error (after which
    the context may be unusable: exit, the parent starts another)."""
    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the replies
    inputs: dict[str, list[list[Any]]] = {}
    while True:
        message = _receive(requests)
        if message is None:
            return
        kind, payload = message
        if kind == "inputs":
            name, sets = payload
            held = _kept(list(inputs), name)
            inputs = {n: sets if n == name else inputs[n] for n in held}
            continue
        candidate, how = payload
        try:
            _send(replies, ("ok", _run_one(candidate, inputs[candidate.inputs], *how)))
        except Exception as err:  # noqa: BLE001 (every failure makes the candidate invalid)
            _send(replies, ("error", f"{type(err).__name__}: {err}"))
            return


if __name__ == "__main__":
    _serve()
