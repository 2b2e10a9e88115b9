"""Build many programs' PTX at once, in worker processes, into the on-disk cache.

    prebuild(programs)            # then compiled_kernel(p) is a cache hit for each
    python -m tilevm.backend.prebuild JOBS.pickle    # one worker (what prebuild starts)

Why: the quantized matmul's tuner compiles every candidate schedule of a problem (up to
20) before it times them. One after the other that took 10-40 s of a first call: the
passes, codegen and LLVM are single-threaded, 0.5-2.5 s a kernel. The builds are
independent, so N worker processes take about 1/N of that, plus their start (about
0.6 s, importing tilevm, in parallel).

Expects: picklable programs (the IR is frozen dataclasses) and a writable kernel cache,
shared with the workers through the environment (`TILEVM_CACHE_DIR`); without one the
workers' results are lost and each program is built again where it is loaded (correct,
only slower). Guarantees nothing but speed: a program whose build fails in a worker is
left unbuilt, so the caller's own build raises the error, naming the user's source
line, as it would without `prebuild`. Workers are plain `python -m` subprocesses given
the caller's `sys.path` (not `multiprocessing`, whose spawned children import the
caller's main script again). `TILEVM_COMPILE_WORKERS` caps their number (default: the
CPUs this process may run on; 1 builds nothing here).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

from tilevm.backend import cache, launch
from tilevm.ir.stmt import Program

WORKERS_ENV = "TILEVM_COMPILE_WORKERS"


def worker_count() -> int:
    """Workers `prebuild` starts at most: `$TILEVM_COMPILE_WORKERS`, else the CPUs this
    process may run on."""
    env = os.environ.get(WORKERS_ENV, "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise ValueError(f"{WORKERS_ENV} must be a whole number of processes, got "
                             f"{env!r}") from None
    return usable_cpus()


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (not on every platform)
        return os.cpu_count() or 1


def worker_environment() -> dict[str, str]:
    """The environment of a `python -m tilevm...` worker process: this one's, with
    `sys.path` as PYTHONPATH, so that the worker imports the caller's tilevm."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [entry or os.getcwd() for entry in sys.path]))


def prebuild(programs: Sequence[Program], arch: str | None = None, *,
             timeout: float = 600.0) -> int:
    """Build the programs not yet in the kernel cache for `arch` (default: the current
    device's, as `launch.compiled_kernel`), spread over worker processes; the number
    handed to workers (0 where one worker or fewer would do: the caller builds)."""
    arch = arch or launch.current_arch()
    store = cache.default_cache()
    todo: dict[str, Program] = {}
    for program in programs:
        key = launch.cache_key(program, arch)
        digest = key.digest()
        if digest not in todo and not store.path_for(key).exists():
            todo[digest] = program
    jobs = list(todo.values())
    count = min(len(jobs), worker_count())
    if count <= 1:
        return 0
    env = worker_environment()
    with tempfile.TemporaryDirectory(prefix="tilevm-prebuild-") as folder:
        workers = []
        for i in range(count):
            jobs_file, log = Path(folder) / f"jobs{i}.pickle", Path(folder) / f"log{i}"
            jobs_file.write_bytes(pickle.dumps((jobs[i::count], arch)))
            with log.open("wb") as stderr:  # (a file: a full pipe would stall the worker)
                workers.append((log, subprocess.Popen(
                    [sys.executable, "-m", "tilevm.backend.prebuild", str(jobs_file)],
                    env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=stderr)))
        deadline = time.monotonic() + timeout
        for log, worker in workers:
            try:
                worker.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
                continue
            if worker.returncode:  # not a program's error (those are skipped): the setup's
                lines = log.read_text(errors="replace").strip().splitlines()
                warnings.warn(f"a tilevm compile worker failed ("
                              f"{lines[-1] if lines else 'no output'}); its programs are "
                              "built where they are loaded", RuntimeWarning, stacklevel=2)
    return len(jobs)


def _work(path: str) -> None:
    """Build each program of a job file into the cache, skipping those that fail."""
    programs, arch = pickle.loads(Path(path).read_bytes())
    for program in programs:
        try:
            cache.get_or_build(launch.cache_key(program, arch),
                               lambda program=program: launch.build_artifact(program, arch))
        except Exception:  # noqa: BLE001  (the caller's own build reports it)
            continue


if __name__ == "__main__":
    _work(sys.argv[1])
