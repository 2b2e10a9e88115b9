"""`vmc run` without `--interpret`: on the GPU and in the interpreter.

On the CPU: the arguments, the error without a GPU (the driver's absence simulated as
the runtime tests do), and the GPU mode's checks and report against a stand-in GPU that
runs the interpreter (`gpu_run.run_on_gpu` replaced), with results perturbed to see each
check fail. On a GPU (marked `gpu`): every example in examples/ passes, as the issue's
acceptance asks (`vmc run examples/*.py`). The interpreter-only mode's tests are in
tests/vm/test_examples.py.
"""

from __future__ import annotations

import copy
import importlib
import subprocess
import sys

import numpy as np
import pytest
from kernel_harness import ROOT, vmc

from tilevm import dtypes
from tilevm.backend import gpu_run
from tilevm.backend.cuda import driver
from tilevm.cli.common import compare
from tilevm.cli.run import agreement
from tilevm.ir.errors import VMError
from tilevm.vm import interpreter
from tilevm.vm.frontend import Kernel

EXAMPLES = ROOT / "examples"


class NoLibcuda:
    """cuda-python's bindings on a machine without libcuda.so: they raise on first use."""

    def cuInit(self, flags: int):
        raise RuntimeError("libcuda.so: cannot open shared object file")


@pytest.fixture
def no_driver(monkeypatch):
    monkeypatch.setattr(driver, "bindings", lambda: NoLibcuda())
    monkeypatch.setattr(driver, "_initialised", False)


def test_without_a_gpu_it_is_a_usage_error(capsys, no_driver):
    status, out, err = vmc(capsys, "run", str(EXAMPLES / "vector_add.py"))
    assert status == 2 and out == "" and "Traceback" not in err
    assert err.startswith("vmc run: error: no GPU found") and "libcuda.so" in err
    assert "add --interpret" in err
    # problems with the file come first, and --interpret needs no GPU
    status, _, err = vmc(capsys, "run", str(EXAMPLES / "nothere.py"))
    assert status == 2 and "no such file" in err
    status, out, _ = vmc(capsys, "run", str(EXAMPLES / "vector_add.py"), "--interpret",
                         "--set", "n=40")
    assert status == 0 and out.rstrip().endswith("PASS")


def test_without_cuda_python_it_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    monkeypatch.setitem(sys.modules, "cuda.cuda", None)
    monkeypatch.setattr(driver, "_initialised", False)
    status, _, err = vmc(capsys, "run", str(EXAMPLES / "matmul.py"))
    assert status == 2 and "no GPU found" in err and "cuda-python" in err


def test_run_arguments(capsys):
    path = str(EXAMPLES / "vector_add.py")
    status, _, err = vmc(capsys, "run", path, "--interpret", "--gpu-only")
    assert status == 2 and "not allowed with" in err
    status, _, err = vmc(capsys, "run", path, "--repeat", "-1")
    assert status == 2 and "--repeat" in err and "non-negative" in err
    status, _, err = vmc(capsys, "run", path, "--repeat", "lots")
    assert status == 2 and "--repeat" in err



def test_help_documents_both_modes(capsys):
    status, out, _ = vmc(capsys, "run", "--help")
    assert status == 0
    for words in ("--interpret", "--gpu-only", "--repeat", "CUDA events", "bitwise",
                  "no GPU", "examples: vmc run examples/vector_add.py"):
        assert words in out, words


# ---- the GPU mode against a stand-in GPU -----------------------------------------------------

class StandInGPU:
    """`gpu_run.run_on_gpu` by the interpreter, on copies of the arguments (as the real
    one leaves them untouched); `perturb(outputs)` then changes what it returns."""

    def __init__(self, perturb=None, error: Exception | None = None) -> None:
        self.perturb = perturb
        self.error = error
        self.calls: list[int] = []

    def __call__(self, program, args, repeat=100):
        self.calls.append(repeat)
        if self.error is not None:
            raise self.error
        outputs = copy.deepcopy(list(args))
        interpreter.run(program, outputs)
        if self.perturb is not None:
            self.perturb(outputs)
        time = gpu_run.KernelTime(2.5e-6, repeat, "stand-in") if repeat else None
        return gpu_run.GpuRun(outputs=outputs, time=time)


@pytest.fixture
def stand_in(monkeypatch):
    def install(gpu: StandInGPU) -> StandInGPU:
        monkeypatch.setattr(gpu_run, "gpu_device", lambda: gpu_run.GpuDevice("Stand-in",
                                                                             "sm_90a"))
        monkeypatch.setattr(gpu_run, "run_on_gpu", gpu)
        return gpu
    return install


def test_gpu_mode_report(capsys, stand_in):
    gpu = stand_in(StandInGPU())
    status, out, _ = vmc(capsys, "run", str(EXAMPLES / "vector_add.py"), "--set", "n=100",
                         "--repeat", "7")
    lines = out.splitlines()
    assert status == 0 and gpu.calls == [7]
    assert lines[0] == "vector_add: GPU (Stand-in, sm_90a) and interpreter, seed 0, " \
                       "constants: defaults"
    assert lines[1].startswith("  arguments: x float32[100]")
    assert lines[2].startswith("  out (GPU): max abs err") and lines[2].endswith("PASS")
    assert lines[3].startswith("  out (interpreter): max abs err")
    assert lines[4] == "  out (GPU vs interpreter): bitwise equal"
    assert lines[5] == "  kernel time: 2.50 us (median of 7 launches; stand-in)"
    assert lines[6:] == ["PASS"]


def test_gpu_only_skips_the_interpreter(capsys, stand_in, monkeypatch):
    stand_in(StandInGPU())

    def no_interpreter(*args, **kwargs):
        raise AssertionError("the interpreter ran")

    monkeypatch.setattr(Kernel, "interpret", no_interpreter)
    status, out, _ = vmc(capsys, "run", str(EXAMPLES / "vector_add.py"), "--gpu-only",
                         "--set", "n=100", "--repeat", "0")
    assert status == 0 and "GPU (Stand-in, sm_90a) only" in out
    assert "interpreter)" not in out and "kernel time" not in out
    assert out.rstrip().endswith("PASS")


def last_element_times(factor: float):
    def perturb(outputs):
        outputs[2][-1] *= np.float32(factor)
    return perturb


def test_gpu_mode_fails_on_a_wrong_gpu_result(capsys, stand_in):
    # One ulp off in one element: within the tolerance, reported as a difference.
    stand_in(StandInGPU(perturb=last_element_times(1 + 2.0 ** -23)))
    status, out, _ = vmc(capsys, "run", str(EXAMPLES / "vector_add.py"), "--set", "n=100")
    assert status == 0 and "out (GPU vs interpreter): 1 of 100 elements differ" in out
    # Far off: the GPU's line fails, and the run.
    stand_in(StandInGPU(perturb=last_element_times(1.5)))
    status, out, _ = vmc(capsys, "run", str(EXAMPLES / "vector_add.py"), "--set", "n=100")
    assert status == 1 and out.rstrip().endswith("FAIL")
    assert "out (GPU)" in out and [l for l in out.splitlines() if "(GPU)" in l][0].endswith(
        "FAIL")
    assert [l for l in out.splitlines() if "(interpreter)" in l][0].endswith("PASS")


def test_gpu_errors_fail_the_run(capsys, stand_in):
    stand_in(StandInGPU(error=VMError("ptxas rejected it")))
    status, out, err = vmc(capsys, "run", str(EXAMPLES / "vector_add.py"), "--set", "n=10")
    assert status == 1 and out.rstrip().endswith("FAIL")
    assert "vector_add failed on the GPU" in err and "ptxas rejected it" in err


def test_agreement_is_bitwise():
    a = np.array([1.0, -0.0, np.nan], np.float32)
    assert agreement(a, a.copy()) == (True, "bitwise equal")
    b = a.copy()
    b[1] = 0.0  # equal as numbers, not as bits
    same, text = agreement(a, b)
    assert not same and text.startswith("1 of 3 elements differ")
    ints = np.arange(6, dtype=np.int32).reshape(2, 3)
    other = ints.copy()
    other[1, 2] += 4
    assert agreement(ints, other) == (False, "1 of 6 elements differ (max abs diff 4)")
    assert not agreement(ints, ints.astype(np.int64))[0]


# ---- on the GPU ----------------------------------------------------------------------------

def example_targets() -> list[str]:
    """Every kernel of every example, as `vmc run` names it (FILE.py[:KERNEL])."""
    targets = []
    for path in sorted(EXAMPLES.glob("*.py")):
        if path.stem == "__init__":
            continue
        module = importlib.import_module(f"tilevm.examples.{path.stem}")
        kernels = {id(v): name for name, v in vars(module).items() if isinstance(v, Kernel)}
        names = list(kernels.values())
        targets += [str(path)] if len(names) == 1 else [f"{path}:{n}" for n in names]
    return targets


@pytest.mark.gpu
@pytest.mark.parametrize("target", example_targets(), ids=lambda t: t.rsplit("/", 1)[-1])
@pytest.mark.parametrize("seed", [0, 1])
def test_every_example_passes_on_the_gpu(capsys, target, seed):
    status, out, err = vmc(capsys, "run", target, "--seed", str(seed), "--repeat", "20")
    assert status == 0, out + err
    assert "(GPU): max abs err" in out and "(GPU vs interpreter)" in out
    time_line = next(l for l in out.splitlines() if l.startswith("  kernel time: "))
    assert 0 < float(time_line.split()[2]) < 1e5  # microseconds
    assert "host time excluded" in time_line  # the gated method worked on this device
    assert out.rstrip().endswith("PASS")


@pytest.mark.gpu
@pytest.mark.parametrize("wdtype, group_size", [("int3", 32), ("f4e2m1", 128), ("int8", 32)])
def test_quantized_matmul_types_pass_on_the_gpu(capsys, wdtype, group_size):
    status, out, err = vmc(capsys, "run", str(EXAMPLES / "quantized_matmul.py"),
                           "--set", f"wdtype={wdtype}", "--set", f"group_size={group_size}",
                           "--set", "M=17", "--repeat", "5")
    assert status == 0 and out.rstrip().endswith("PASS"), out + err


@pytest.mark.gpu
def test_python_m_tilevm_run_on_the_gpu():
    run = subprocess.run([sys.executable, "-m", "tilevm", "run", str(EXAMPLES / "matmul.py"),
                          "--gpu-only", "--set", "M=300", "--set", "N=260", "--set", "K=520"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "only" in run.stdout and "kernel time" in run.stdout
    assert run.stdout.rstrip().endswith("PASS")


def test_compare_decodes_floats_held_as_codes():
    """bf16 (uint16 codes on the host) and 8-bit floats are judged as the values their
    codes denote, with the type's epsilon, not as integers that must match exactly."""
    ref = np.linspace(-3.0, 3.0, 50)
    for name in ("bf16", "f8e4m3"):
        dtype = dtypes.parse(name)
        codes = dtypes.encode(ref, dtype)
        assert compare(codes, ref, 2.0 ** -16, dtype)[0], name
        assert not compare(codes, ref, 2.0 ** -16)[0], name  # as integers: no match
        wrong = codes.copy()
        wrong[7] ^= 1 << (dtype.bits - 3)  # an exponent bit: far off
        assert not compare(wrong, ref, 2.0 ** -16, dtype)[0], name
