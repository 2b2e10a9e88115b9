"""The frontend fuzzer: random kernel files (tests/frontend_programs.py) through the
whole tool chain. Every program either compiles for sm_80 and sm_90a or raises a
`VMError` at a line of its file; valid programs agree with their numpy reference in the
interpreter; malformed ones raise a `VMError` at the wrong statement's line.

CI runs the `ci` profile's examples derandomized (a fixed seed) and compiles most
programs through the passes and LLVM codegen only (the LLVM module parsed and verified),
a few through to PTX. `HYPOTHESIS_PROFILE=fuzz` runs 100,000 random programs, each to
PTX for both targets, each under a 30 s watchdog (FUZZ_EXAMPLES sets the count).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import signal
import tempfile
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
from frontend_programs import FuzzProgram, fuzz_programs
from hypothesis import HealthCheck, given, settings

from tilevm.backend.llvm import codegen
from tilevm.backend.pipeline import compile_program, run_passes
from tilevm.ir.errors import VMError

LONG = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"
ARCHS = ("sm_80", "sm_90a")
WATCHDOG_S = 30
# In CI, one program in this many is compiled to PTX; the others to verified LLVM IR.
PTX_ONE_IN = 1 if LONG else 8
CI_EXAMPLES = 200

_DIR = Path(tempfile.mkdtemp(prefix="tilevm_fuzz_"))


def _fuzz_settings():
    if LONG:
        return settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 100_000)),
                        deadline=None, derandomize=False, database=None,
                        suppress_health_check=list(HealthCheck))
    return settings(max_examples=CI_EXAMPLES, deadline=None, derandomize=True,
                    database=None, suppress_health_check=list(HealthCheck))


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Timeout(f"a program ran over {WATCHDOG_S} s")


def _kernel_of(case: FuzzProgram):
    """Write the source to a file named by its hash (the frontend reads kernels from
    files) and import it; not through kernel_harness.load_module, whose cache would keep
    every program of a long run alive."""
    digest = hashlib.sha1(case.source.encode()).hexdigest()[:16]
    path = _DIR / f"fuzz_{digest}.py"
    path.write_text(case.source)
    spec = importlib.util.spec_from_file_location(f"_fuzz_{digest}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module.fuzz


def _compile(program, ptx: bool) -> None:
    for arch in ARCHS:
        if ptx:
            compile_program(program, arch)
        else:
            module = llvm.parse_assembly(str(codegen.generate(run_passes(program, arch=arch))))
            module.verify()


def _check(case: FuzzProgram) -> None:
    path, kernel = _kernel_of(case)
    context = f"\n--- {path} ({case.description or 'valid'}) ---\n{case.source}"
    rng = np.random.default_rng(len(case.source))
    M = int(rng.integers(1, 2 * case.rows + 1))
    N = int(rng.integers(1, 2 * case.cols + 1))
    reps = int(rng.integers(1, 4))
    args = case.arguments(rng, M, N, reps)
    ptx = int(hashlib.sha1(case.source.encode()).hexdigest(), 16) % PTX_ONE_IN == 0
    try:
        _run(case, kernel, args, path, context, ptx)
    finally:
        path.unlink()
    if case.valid:
        expected = case.reference(args[0], args[1], M, N, reps)
        got = args[2].astype(np.float64)
        mismatch = np.argwhere(got != expected)
        assert not len(mismatch), (
            f"interpreter and numpy disagree at {mismatch[:4].tolist()} (M={M}, N={N}, "
            f"reps={reps}):\n got {got[tuple(mismatch[0])]}, expected "
            f"{expected[tuple(mismatch[0])]}{context}")


def _run(case: FuzzProgram, kernel, args: list, path: Path, context: str, ptx: bool) -> None:
    """Specialize, interpret and compile; a VMError must be a malformed program's, at
    its wrong line; a malformed program must raise one."""
    try:
        program = kernel.specialize()
        kernel.interpret(*args)
        _compile(program, ptx)
    except VMError as error:
        assert error.loc is not None, f"a VMError without a line: {error}{context}"
        assert error.loc.file == str(path) or Path(error.loc.file).name == path.name, (
            f"a VMError at another file's line: {error}{context}")
        assert case.bad_lines, f"a valid program was rejected: {error}{context}"
        assert error.loc.line in case.bad_lines, (
            f"the error names line {error.loc.line}, not {case.bad_lines}: {error}{context}")
        return
    assert case.valid, f"a malformed program ({case.description}) was accepted{context}"


@_fuzz_settings()
@given(fuzz_programs())
def test_fuzz_frontend(case: FuzzProgram) -> None:
    if not LONG:
        _check(case)
        return
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(WATCHDOG_S)
    try:
        _check(case)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)

