"""Candidates ranked by predicted time: what a tuner times first.

A candidate is the launches one call makes (a program, its runtime scalars and the
resources its blocks hold, per launch); its predicted time is the sum of the launches'
`cost.model.estimate`. The estimates walk every block's footprint, seconds for a large
grid in Python, so several candidates are estimated at once in worker processes:
plain `python -m tilevm.tune.rank` subprocesses given the caller's `sys.path`, as
`backend.prebuild` starts (not `multiprocessing`: a forked child must not touch the
tuner's CUDA context, and spawned ones import the caller's main script again). A
worker that fails leaves its candidates to this process. The quantized-matmul tuner
times only the head of the ranking; how close that comes to timing everything is
measured in docs/cost-model.md.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from tilevm.backend.prebuild import usable_cpus, worker_environment
from tilevm.cost.hardware import GPU
from tilevm.cost.model import Resources, estimate
from tilevm.ir.stmt import Program

__all__ = ["Launch", "predicted_seconds", "fastest"]

Launch = tuple[Program, Mapping[str, int], Resources]  # a program, its scalars, resources


def _predicted(launches: Sequence[Launch], gpu: GPU) -> float:
    return sum(estimate(program, _own(program, scalars), gpu, resources).predicted_s
               for program, scalars, resources in launches)


def _own(program: Program, scalars: Mapping[str, int]) -> dict[str, int]:
    """The scalars among `scalars` that are parameters of `program` (a call's launches
    share one set of sizes, which not every kernel takes)."""
    names = {p.name for p in program.params}
    return {name: value for name, value in scalars.items() if name in names}


def predicted_seconds(candidates: Sequence[Sequence[Launch]], gpu: GPU,
                      workers: int | None = None) -> list[float]:
    """Each candidate's predicted time in seconds, in order. `workers`: processes to
    spread the estimates over (default: one per CPU, at most one per candidate; 1: in
    this process)."""
    workers = min(len(candidates), workers or usable_cpus())
    if workers <= 1:
        return [_predicted(launches, gpu) for launches in candidates]
    found: dict[int, float] = {}
    env = worker_environment()
    with tempfile.TemporaryDirectory(prefix="tilevm-rank-") as folder:
        running = []
        for w in range(workers):
            jobs, out = Path(folder) / f"jobs{w}.pickle", Path(folder) / f"out{w}.pickle"
            mine = list(range(w, len(candidates), workers))
            jobs.write_bytes(pickle.dumps(([candidates[i] for i in mine], gpu)))
            running.append((mine, out, subprocess.Popen(
                [sys.executable, "-m", "tilevm.tune.rank", str(jobs), str(out)], env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL)))
        for mine, out, worker in running:
            if worker.wait() == 0 and out.exists():
                found.update(zip(mine, pickle.loads(out.read_bytes()), strict=True))
    return [found[i] if i in found else _predicted(launches, gpu)
            for i, launches in enumerate(candidates)]


def _work(jobs: str, out: str) -> None:
    """A worker: the predicted times of a job file's candidates, pickled into `out`."""
    candidates, gpu = pickle.loads(Path(jobs).read_bytes())
    Path(out).write_bytes(pickle.dumps([_predicted(launches, gpu) for launches in candidates]))


def fastest(predicted: Sequence[float], fraction: float) -> list[int]:
    """The indices of the fastest `fraction` of the candidates by predicted time (at
    least one; ties in the given order), fastest first."""
    if not 0 < fraction <= 1:
        raise ValueError(f"the fraction of candidates kept must be in (0, 1], got {fraction}")
    order = sorted(range(len(predicted)), key=lambda i: (predicted[i], i))
    return order[:max(1, int(len(predicted) * fraction))] if predicted else []


if __name__ == "__main__":
    _work(sys.argv[1], sys.argv[2])
