"""Helpers the compiler tests share (tests/ is on sys.path): loading kernel files,
compiling a program and assembling PTX once per test session, running one kernel
both on the GPU and in the interpreter on the same inputs, and the quantized matmul
kernels' random problems with their float64 reference and tolerance."""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from tilevm.backend import ptxas
from tilevm.backend.launch import launch_program
from tilevm.backend.pipeline import CompiledKernel, compile_program
from tilevm.cli import main as vmc_main
from tilevm.ir.stmt import Program
from tilevm.kernels.weight_format import FRAGMENTS
from tilevm.kernels.weights import quantize

# The spill tests' slack: ptxas (13.0) sometimes keeps a kernel at an occupancy step (96,
# 128 registers) by spilling a few bytes rather than using a few more registers (the
# 2-bit decode kernel on sm_80, one example tiling on sm_90); a register blowup spills
# hundreds. So "compiles without spills" allows this much.
SPILL_SLACK = 32  # bytes

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent  # the repository, which is the package
PROGRAMS = TESTS / "programs"  # the kernels that tests compile, in files of their own
GOLDEN = TESTS / "golden"  # golden IR texts


_MODULES: dict[tuple[Path, str], ModuleType] = {}


def load_module(path: Path) -> ModuleType:
    """Import a Python file (kernels must live in files: the frontend reads their source),
    once per path and source text in a test session: test files that load the same
    kernels get the same kernel objects, hence the same programs (`compile_once`)."""
    key = (Path(path).resolve(), Path(path).read_text())
    if key not in _MODULES:
        spec = importlib.util.spec_from_file_location(f"_k_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _MODULES[key] = module
    return _MODULES[key]


# Programs compiled in this session, by (id(program), arch); each entry keeps its program
# alive, so an id is never reused for another program while the entry exists.
_COMPILED: dict[tuple[int, str], tuple[Program, CompiledKernel]] = {}


def compile_once(program: Program, arch: str) -> CompiledKernel:
    """`compile_program(program, arch)`, once per program and arch in a test session.

    A kernel's `specialize` returns the same Program object for the same constants (and
    the library's kernel factories are cached), so tests in any file that look at the
    same kernel for the same arch share one compile. Each entry stays in memory for the
    session; a compile that raises is not kept."""
    key = (id(program), arch)
    if key not in _COMPILED:
        _COMPILED[key] = (program, compile_program(program, arch))
    return _COMPILED[key][1]


def ptx_as_compiled_for(program: Program, arch: str) -> str:
    """The PTX of `program` for `arch` (sm_80 or sm_90), compiled once for sm_80: for
    programs with no instruction of sm_90a, the compiler's output for sm_90 is sm_80's with
    another `.target` line (the tests that use this assert so for the programs they check),
    so only ptxas' work depends on which of the two it is."""
    ptx = compile_once(program, "sm_80").ptx
    return ptx if arch == "sm_80" else ptx.replace(".target sm_80", f".target {arch}", 1)


@functools.cache
def ptxas_report(ptx: str, arch: str) -> ptxas.ResourceReport:
    """`ptxas.check_ptx(ptx, arch)`, once per PTX text and arch in a test session."""
    return ptxas.check_ptx(ptx, arch)


def run_both(kernel: Any, args: list, constants: dict | None = None) -> tuple[list, list]:
    """Run `kernel` compiled on the GPU and in the interpreter, each on its own copy of
    `args` (numpy arrays and scalars); return (gpu outputs, interpreter outputs)."""
    constants = constants or {}
    expected = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    kernel.interpret(*expected, **constants)
    got = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    launch_program(kernel.specialize(**constants), got)
    return got, expected


def vmc(capsys: Any, *args: str) -> tuple[int, str, str]:
    """`vmc ARGS` in this process (the process entry itself is tested in test_cli.py): its
    exit status (argparse's errors exit), stdout and stderr; an exception escaping `main`
    (a traceback) fails the test."""
    try:
        status = vmc_main(list(args))
    except SystemExit as stop:
        status = stop.code
    out, err = capsys.readouterr()
    return status, out, err


def cuda_tools() -> tuple[str, str]:
    """ptxas and nvdisasm from one folder (one CUDA release): the test extras' wheels
    (nvidia/cu13/bin), else a toolkit's bin/ on PATH or in /usr/local/cuda."""
    folders = [Path(entry) / "nvidia" / sub / "bin" for entry in sys.path
               for sub in ("cu13", "cuda_nvcc")]
    folders += [Path(d) for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    folders.append(Path("/usr/local/cuda/bin"))
    for folder in folders:
        if (folder / "ptxas").is_file() and (folder / "nvdisasm").is_file():
            return str(folder / "ptxas"), str(folder / "nvdisasm")
    raise AssertionError("no folder holds both ptxas and nvdisasm (test extras: "
                         "nvidia-cuda-nvcc, nvidia-cuda-nvdisasm)")


def qmm_problem(wdtype: str, M: int, N: int, K: int, g: int, zeros: bool, seed: int = 0):
    """x [M, K] f16, W [K, N] quantized to `wdtype` in groups of g (the fragments
    format) and the float64 reference x @ dequantize(W)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((K, N))
    qw = quantize(w, wdtype, g, zero_point=zeros, format=FRAGMENTS)
    x = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    ref = x.astype(np.float64) @ qw.dequantize()
    return x, qw, ref


def qmm_tolerance(x: np.ndarray, qw: Any, ref: np.ndarray) -> float:
    """f32 accumulation of f16 products (each dequantized weight rounded to f16 once, as
    the kernels do) and one f16 rounding of the result."""
    K = qw.shape[0]
    w_max = float(np.abs(qw.dequantize()).max())
    return 2.0 ** -11 * (np.abs(ref).max() + K * float(np.abs(x).max()) * w_max / 8) + 1e-6


def cuda_torch() -> Any:
    """PyTorch, for a GPU test that runs through it; the test is skipped where PyTorch is
    not installed or sees no GPU."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no GPU")
    return torch


def require_sm90(what: str) -> None:
    """Skip a GPU test whose code needs an sm_90 GPU (wgmma, TMA, clusters) on any other
    (`what` names it in the reason)."""
    from tilevm.backend.cuda import driver

    if driver.device_arch() != "sm_90":
        pytest.skip(f"needs an sm_90 GPU ({what})")
