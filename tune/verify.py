"""The checks a search's winner passes before it enters the tuning cache: its outputs on
at least `SAMPLES` (10^7, SIP's figure) output values of fresh random inputs, and clean
runs under compute-sanitizer's memcheck and racecheck.

    report = check_samples(winner, make_inputs, reference=unmutated, compare=within_bound)
    report.passed, report.samples, report.failures
    sanitized = sanitize(winner, inputs, "memcheck")      # or "racecheck"
    sanitized.clean, sanitized.report

`check_samples` draws input sets from `make_inputs(i)` (i = 0, 1, ...) until the
compared output values reach `samples`, and runs them in the runner (`tune.runner`, a
child process behind a watchdog) in batches. Each set passes when

- the winner runs (no CUDA error, no timeout);
- with `reference` (the unmutated kernel): every array the winner writes is bitwise
  equal to the reference's on the same set (reordering changes no arithmetic);
- with `compare(args, arrays)` -> (values compared, failure or None): the caller's
  numeric check, e.g. against a float64 reference within an error bound.

`sanitize` runs one candidate on the given input sets (untimed) in a worker started
under `compute-sanitizer --tool TOOL`, its log in a file: clean when the candidate ran
and the sanitizer exited with status 0 (it exits with `SANITIZER_FAILED` on an error
it found; memcheck also stops the kernel at an invalid access, and the candidate then
fails: no status, the report says why). The sanitizer is found as
`backend.ptxas.find_cuda_tool` finds the toolkit's programs.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tilevm.backend.ptxas import CudaToolNotFoundError, find_cuda_tool
from tilevm.ir.stmt import Program
from tilevm.ir.types import Pointer
from tilevm.tune.runner import Candidate, Runner

__all__ = ["SAMPLES", "SANITIZER_FAILED", "SampleCheck", "Sanitized", "check_samples",
           "sanitize", "find_sanitizer", "SanitizerNotFoundError"]

SAMPLES = 10_000_000
SANITIZER_FAILED = 86  # the exit status asked of compute-sanitizer when it finds an error
TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
SANITIZER_GRACE_S = 60.0  # for the sanitizer to write its report after a failed run
KEPT_FAILURES = 5  # failure descriptions kept in a report

Compare = Callable[[Sequence[Any], tuple[np.ndarray, ...]], tuple[int, str | None]]


class SanitizerNotFoundError(RuntimeError):
    """No compute-sanitizer executable was found."""


@dataclass(frozen=True)
class SampleCheck:
    """Output values compared, input sets run, and the first failures (empty: passed)."""

    samples: int
    input_sets: int
    failures: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.failures


@dataclass(frozen=True)
class Sanitized:
    """One sanitizer's verdict: the tool, whether the run was clean, the candidate's
    error if it failed to run, the sanitizer's exit status and its log."""

    tool: str
    clean: bool
    error: str | None
    status: int | None
    report: str


def check_samples(candidate: Candidate, make_inputs: Callable[[int], Sequence[Any]], *,
                  reference: Candidate | None = None, compare: Compare | None = None,
                  samples: int = SAMPLES, batch: int = 8,
                  timeout_s: float = 300.0) -> SampleCheck:
    """Run `candidate` on input sets from `make_inputs` until `samples` output values are
    compared (module docstring), at most `batch` sets per run; the candidates' `inputs`
    names are replaced by the check's own sets."""
    if reference is None and compare is None:
        raise ValueError("check_samples needs a reference candidate, a compare, or both")
    if samples < 1 or batch < 1:
        raise ValueError(f"samples and batch must be >= 1, got {samples} and {batch}")
    compared, sets, failures = 0, 0, []
    with Runner([], repeat=0, timeout_s=timeout_s) as runner:
        while compared < samples and len(failures) < KEPT_FAILURES:
            # one set first; then as many as the values per set so far say are left
            count = 1 if sets == 0 else \
                min(batch, -(-(samples - compared) * sets // max(compared, 1)))
            inputs = [list(make_inputs(sets + k)) for k in range(count)]
            name = f"samples{sets}"
            runner.add_inputs(name, inputs)
            outcome = runner.run(_on(candidate, name), keep_arrays=compare is not None)
            if not outcome.valid:
                failures.append(f"input sets {sets}-{sets + count - 1}: {outcome.error}")
                break
            if reference is not None:
                expected = runner.run(_on(reference, name))
                if not expected.valid:
                    raise RuntimeError(f"the reference kernel failed: {expected.error}")
                assert outcome.outputs is not None and expected.outputs is not None
                for k, (got, want) in enumerate(zip(outcome.outputs, expected.outputs,
                                                    strict=True)):
                    if got != want:
                        failures.append(f"input set {sets + k}: outputs differ bitwise "
                                        f"from the reference kernel's")
            for k, args in enumerate(inputs):
                if compare is not None:
                    assert outcome.arrays is not None
                    values, failure = compare(args, outcome.arrays[k])
                    if failure is not None:
                        failures.append(f"input set {sets + k}: {failure}")
                else:
                    values = _written_values(candidate.program, args)
                compared += values
            sets += count
            runner.discard_inputs(name)
    return SampleCheck(compared, sets, tuple(failures[:KEPT_FAILURES]))


def _on(candidate: Candidate, inputs: str) -> Candidate:
    return dataclasses.replace(candidate, inputs=inputs)


def _written_values(program: Program, args: Sequence[Any]) -> int:
    """How many values the arrays `program` may write hold in `args`."""
    return sum(np.asarray(value).size for param, value in zip(program.params, args)
               if isinstance(param, Pointer) and not param.type.readonly)


def find_sanitizer() -> str:
    """The compute-sanitizer executable (`backend.ptxas.find_cuda_tool`), or
    `SanitizerNotFoundError`."""
    try:
        return find_cuda_tool("compute-sanitizer")
    except CudaToolNotFoundError as err:
        raise SanitizerNotFoundError(f"{err}, or skip the sanitizer checks") from None


def sanitize(candidate: Candidate, inputs: Sequence[Sequence[Any]], tool: str, *,
             timeout_s: float = 600.0) -> Sanitized:
    """`candidate` run once on each input set under compute-sanitizer's `tool`."""
    if tool not in TOOLS:
        raise ValueError(f"unknown sanitizer tool {tool!r}: one of {', '.join(TOOLS)}")
    exe = find_sanitizer()
    with tempfile.TemporaryDirectory(prefix="tilevm-sanitize.") as folder:
        log = Path(folder) / "log.txt"
        launcher = [exe, "--tool", tool, "--error-exitcode", str(SANITIZER_FAILED),
                    "--log-file", str(log)]
        runner = Runner(inputs, repeat=0, timeout_s=timeout_s, cold_l2=False,
                        launcher=launcher, grace_s=SANITIZER_GRACE_S)
        try:
            outcome = runner.run(dataclasses.replace(candidate, inputs=""))
            status = runner.finish(timeout_s) if outcome.valid else None
        finally:
            runner.close()
        report = log.read_text(errors="replace") if log.exists() else ""
    return Sanitized(tool, outcome.valid and status == 0, outcome.error, status, report)
