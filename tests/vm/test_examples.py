"""The example programs (examples/*.py) and `vmc run`.

Every example runs in the reference interpreter on fresh random inputs, ragged shapes
included, and matches its float64 numpy reference under `vmc run`'s criterion
(`tilevm.cli.common.compare`: the final rounding to the output type plus f32 accumulation).
Every example's program passes the verifier and round-trips through the IR text.
"""

from __future__ import annotations

import copy
import importlib
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_harness import ROOT

from tilevm import dtypes
from tilevm.cli import main
from tilevm.cli.common import DEFAULT_ATOL, compare
from tilevm.ir.errors import VMError
from tilevm.ir.parser import parse_program
from tilevm.ir.printer import format_program
from tilevm.ir.verifier import verify
from tilevm.vm.frontend import Kernel

EXAMPLES = ROOT / "examples"
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.py") if p.stem != "__init__")

vector_add = importlib.import_module("tilevm.examples.vector_add")
softmax = importlib.import_module("tilevm.examples.softmax")
matmul = importlib.import_module("tilevm.examples.matmul")
qmm = importlib.import_module("tilevm.examples.quantized_matmul")

QMM_DTYPES = ["int3", "int4", "uint4", "int8", "f4e2m1", "f6e3m2", "f8e4m3",
              "int2", "uint5", "f5e2m2", "f6e2m3"]


def kernels_of(module) -> list[Kernel]:
    found: list[Kernel] = []
    for value in vars(module).values():
        if isinstance(value, Kernel) and all(value is not k for k in found):
            found.append(value)
    return found


def run_example(module, kernel: Kernel, seed: int, atol: float | None = None, **setting):
    """Build inputs, run the kernel in the interpreter, and check every output."""
    rng = np.random.default_rng(seed)
    if "kernel" in module.example_inputs.__code__.co_varnames:
        setting["kernel"] = kernel
    args, constants = module.example_inputs(rng, **setting)
    expected = module.reference(*copy.deepcopy(args), **constants)
    kernel.interpret(*args, **constants)
    atol = getattr(module, "ATOL", DEFAULT_ATOL) if atol is None else atol
    for index, want in expected.items():
        assert not np.isnan(args[index]).any(), "an output element was not written"
        ok, stats = compare(args[index], want, atol)
        assert ok, f"{kernel.name} {constants} {args[4:] if len(args) > 4 else ''}: {stats}"
    return args, constants


# ---- every example, through the protocol vmc run uses ------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_example_protocol(name):
    module = importlib.import_module(f"tilevm.examples.{name}")
    assert module.__doc__ and len(module.__doc__.strip()) > 100, "explain what it shows"
    assert callable(module.example_inputs) and callable(module.reference)
    kernels = kernels_of(module)
    assert kernels
    for kernel in kernels:
        for seed in (0, 1):
            run_example(module, kernel, seed)


def example_programs():
    yield "vector_add", vector_add.vector_add.specialize()
    yield "vector_add", vector_add.vector_add.specialize(block=128)
    for k in kernels_of(softmax):
        yield k.name, k.specialize(block_n=64, rows=2)
    yield "matmul", matmul.matmul.specialize()
    yield "matmul", matmul.matmul.specialize(bm=16, bn=64, bk=16)
    for name in QMM_DTYPES:
        for g in (32, 128):
            yield f"qmm-{name}-g{g}", qmm.quantized_matmul.specialize(
                wdtype=dtypes.parse(name), group_size=g)


def test_example_programs_verify_and_round_trip():
    for what, program in example_programs():
        verify(program)
        text = format_program(program)
        again = parse_program(text)
        assert again == program, what
        assert format_program(again) == text, what


# ---- vector add, softmax, matmul -----------------------------------------------------------

@pytest.mark.parametrize("n", [1, 255, 256, 257, 1000])
def test_vector_add_ragged(n):
    run_example(vector_add, vector_add.vector_add, n, n=n, block=256)


@pytest.mark.parametrize("kernel", kernels_of(softmax), ids=lambda k: k.name)
@pytest.mark.parametrize("M, N, rows", [(1, 1, 4), (17, 40, 4), (17, 77, 1), (6, 128, 8)])
def test_softmax_shapes(kernel, M, N, rows):
    run_example(softmax, kernel, M * N, M=M, N=N, rows=rows)


@settings(max_examples=12)
@given(M=st.integers(1, 40), N=st.integers(1, 80), K=st.integers(1, 130),
       tiles=st.sampled_from([(32, 32, 32), (16, 64, 16), (16, 16, 64)]),
       seed=st.integers(0, 2**16))
def test_matmul_ragged(M, N, K, tiles, seed):
    bm, bn, bk = tiles
    run_example(matmul, matmul.matmul, seed, M=M, N=N, K=K, bm=bm, bn=bn, bk=bk)


# ---- quantized matmul -----------------------------------------------------------------------

@pytest.mark.parametrize("group_size", [32, 128])
@pytest.mark.parametrize("wdtype", QMM_DTYPES)
def test_quantized_matmul(wdtype, group_size):
    seed = QMM_DTYPES.index(wdtype) * 2 + group_size // 128
    rng = np.random.default_rng(seed)
    M = (1, 17)[seed % 2]
    N = 8 * int(rng.integers(5, 11))  # 40..80: a ragged last N tile when N > 64
    K = group_size * int(rng.integers(1, 256 // group_size + 1))
    args, constants = run_example(qmm, qmm.quantized_matmul, seed, M=M, N=N, K=K,
                                  wdtype=wdtype, group_size=group_size)
    # Against weights dequantized to f16 (what the kernel feeds the dot), only f32
    # accumulation and the final rounding remain: the default, tight tolerance holds.
    x, w, scales, y = args[:4]
    w16 = qmm.dequantize(w, scales, wdtype, group_size).astype(np.float16)
    ok, stats = compare(y, x.astype(np.float64) @ w16.astype(np.float64), DEFAULT_ATOL)
    assert ok, stats


def test_quantized_matmul_odd_tile_count_and_small_tiles():
    # K / bk odd (the pipeline's extra zero tile), and other tile shapes
    run_example(qmm, qmm.quantized_matmul, 3, M=5, N=24, K=96, wdtype="int5", group_size=32)
    run_example(qmm, qmm.quantized_matmul, 4, M=9, N=40, K=64, wdtype="f3e1m1",
                group_size=32, bm=8, bn=32, num_warps=2)


@settings(max_examples=10)
@given(wdtype=st.sampled_from([t.name for t in dtypes.lowbit_dtypes() if qmm.exact_in_f16(t)]),
       group_size=st.sampled_from([32, 128]), M=st.integers(1, 40), N8=st.integers(1, 17),
       groups=st.integers(1, 2), seed=st.integers(0, 2**16))
def test_quantized_matmul_any_type(wdtype, group_size, M, N8, groups, seed):
    run_example(qmm, qmm.quantized_matmul, seed, M=M, N=8 * N8, K=group_size * groups,
                wdtype=wdtype, group_size=group_size)


def test_quantized_matmul_rejects_types_beyond_f16():
    assert not qmm.exact_in_f16(dtypes.parse("f7e5m1"))
    assert qmm.exact_in_f16(dtypes.parse("f8e5m2")) and qmm.exact_in_f16(dtypes.parse("int8"))
    with pytest.raises(VMError, match="not all f16 values"):
        qmm.quantized_matmul.specialize(wdtype=dtypes.parse("f7e5m1"))


@pytest.mark.parametrize("mutation", [
    ("tv.copy_async_wait(1)", "tv.copy_async_wait(2)"),  # compute before the copy lands
    ("tv.sync()  # every thread is done", "pass  # "),  # refill a stage still being read
])
def test_quantized_matmul_pipeline_is_race_checked(tmp_path, capsys, mutation):
    # The interpreter checks the pipeline's synchronization: each wait and sync matters.
    source = (EXAMPLES / "quantized_matmul.py").read_text()
    assert mutation[0] in source
    broken = tmp_path / "qmm_broken.py"
    broken.write_text(source.replace(mutation[0], mutation[1]))
    status, out, err = vmc(capsys, "run", str(broken), "--interpret", "--set", "M=3")
    assert status == 1 and "shared-memory race" in err


@pytest.mark.parametrize("wdtype", ["int3", "uint5", "f6e3m2", "int8"])
def test_pack_weights_layout(wdtype):
    t = dtypes.parse(wdtype)
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 1 << t.bits, size=(5, 24)).astype(np.uint8)
    packed = qmm.pack_weights(codes, t)
    assert packed.shape == (5, 24 * t.bits // 8) and packed.dtype == np.uint8
    for k in range(5):  # element n of row k at bits [n*b, (n+1)*b) of the row
        bits = np.unpackbits(packed[k], bitorder="little")
        for n in range(24):
            field = bits[n * t.bits:(n + 1) * t.bits]
            assert int((field << np.arange(t.bits)).sum()) == codes[k, n]
    assert np.array_equal(qmm.unpack_weights(packed, t), codes)
    with pytest.raises(ValueError, match="multiple of 8"):
        qmm.pack_weights(codes[:, :20], t)


@pytest.mark.parametrize("wdtype", ["int4", "int8", "f4e2m1", "f8e4m3"])
def test_quantize_round_trip(wdtype):
    t = dtypes.parse(wdtype)
    rng = np.random.default_rng(2)
    w = rng.standard_normal((64, 16))
    packed, scales = qmm.quantize(w, t, 32)
    assert scales.shape == (2, 16) and scales.dtype == np.float16
    back = qmm.dequantize(packed, scales, t, 32)
    # every weight within one quantum at the top of its group's range
    step = np.repeat(scales.astype(np.float64), 32, axis=0) * (t.max / 2 if t.is_float else 1)
    assert np.all(np.abs(back - w) <= step + 1e-3 * np.abs(w).max())


# ---- the criterion --------------------------------------------------------------------------

def test_compare_criterion():
    ref = np.array([1.0, -2.0, 1e-9, 0.0])
    assert compare(ref.astype(np.float16), ref)[0]
    assert compare(ref.astype(np.float32), ref)[0]
    wrong = ref.astype(np.float16)
    wrong[0] += np.float16(0.01)
    ok, stats = compare(wrong, ref)
    assert not ok and stats["worst"] > 1
    with_nan = ref.astype(np.float32)
    with_nan[1] = np.nan
    assert not compare(with_nan, ref)[0]
    assert not compare(np.array([1, 2], np.int32), np.array([1.0, 3.0]))[0]


def test_wrong_output_fails():
    # A kernel off by one scale group must not pass: the checks can fail.
    rng = np.random.default_rng(5)
    args, constants = qmm.example_inputs(rng, M=3, N=16, K=64, wdtype="int4", group_size=32)
    qmm.quantized_matmul.interpret(*args, **constants)
    x, w, scales = args[:3]
    swapped = scales[::-1].copy()
    bad = qmm.reference(x, w, swapped, None, 3, 16, 64, **constants)[3]
    assert not compare(args[3], bad, qmm.ATOL)[0]


# ---- vmc run ----------------------------------------------------------------------------------

def run_vmc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tilevm.cli", *args],
                          capture_output=True, text=True, timeout=120)


def test_vmc_run_end_to_end():
    result = run_vmc("run", str(EXAMPLES / "quantized_matmul.py"), "--interpret",
                     "--set", "wdtype=int3", "--set", "group_size=32", "--set", "M=17",
                     "--seed", "3")
    assert result.returncode == 0, result.stderr
    assert "wdtype=int3" in result.stdout and "M=17" in result.stdout
    assert "max abs err" in result.stdout and result.stdout.rstrip().endswith("PASS")
    result = run_vmc("run", str(EXAMPLES / "softmax.py"), "--interpret")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "softmax_f32" in result.stderr and "softmax_f16" in result.stderr


def vmc(capsys, *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return status, out, err


def test_vmc_run_kernel_selection_and_settings(capsys):
    path = str(EXAMPLES / "softmax.py")
    status, out, _ = vmc(capsys, "run", f"{path}:softmax_f16", "--interpret",
                         "--set", "M=3", "--set", "N=50", "--seed", "4")
    assert status == 0 and "float16[3, 50]" in out and out.rstrip().endswith("PASS")
    status, _, err = vmc(capsys, "run", f"{path}:softmax_f64", "--interpret")
    assert status == 2 and "no kernel 'softmax_f64'" in err and "softmax_f32" in err
    status, _, err = vmc(capsys, "run", str(EXAMPLES / "nothere.py"), "--interpret")
    assert status == 2 and "no such file" in err
    qpath = str(EXAMPLES / "quantized_matmul.py")
    status, _, err = vmc(capsys, "run", qpath, "--interpret", "--set", "wdtype=int33")
    assert status == 2 and "int33" in err
    status, _, err = vmc(capsys, "run", qpath, "--interpret", "--set", "bogus=1")
    assert status == 2 and "bogus" in err and "group_size" in err
    status, _, err = vmc(capsys, "run", qpath, "--interpret", "--set", "noequals")
    assert status == 2 and "name=value" in err


FAILING = '''
import numpy as np
from tilevm.vm import lang as tv

@tv.kernel(num_warps=1)
def double(x: tv.ptr(tv.f32, const=True), out: tv.ptr(tv.f32), n: tv.int32):
    tv.grid(1)
    t = tv.load_global(tv.global_view(x, [n]), [0], [32])
    tv.store_global(tv.global_view(out, [n]), t + t, [0])

def example_inputs(rng, n=20, short=False, **constants):
    x = rng.random(n - 4 if short else n).astype(np.float32)  # short: too small for n
    return [x, np.zeros(n, np.float32), n], constants

def reference(x, out, n, **constants):
    return {1: 3.0 * x}
'''


def test_vmc_run_reports_failures(tmp_path, capsys):
    failing = tmp_path / "failing.py"
    failing.write_text(FAILING)
    status, out, _ = vmc(capsys, "run", str(failing), "--interpret")
    assert status == 1 and "FAIL" in out
    status, out, err = vmc(capsys, "run", str(failing), "--interpret", "--set", "short=True")
    assert status == 1 and "FAIL" in out and "failing.py" in err  # the kernel's error
    assert "outside" in err or "holds" in err
    (tmp_path / "empty.py").write_text("def example_inputs(rng):\n    return [], {}\n")
    status, _, err = vmc(capsys, "run", str(tmp_path / "empty.py"), "--interpret")
    assert status == 2 and "no kernel" in err
    (tmp_path / "broken.py").write_text("import nonexistent_module_xyz\n")
    status, _, err = vmc(capsys, "run", str(tmp_path / "broken.py"), "--interpret")
    assert status == 2 and "nonexistent_module_xyz" in err
    (tmp_path / "noref.py").write_text(FAILING.replace("def reference", "def _reference"))
    status, _, err = vmc(capsys, "run", str(tmp_path / "noref.py"), "--interpret")
    assert status == 2 and "reference" in err


def test_vmc_run_help(capsys):
    with pytest.raises(SystemExit) as stop:  # argparse exits after printing the help
        main(["run", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    for word in ("--interpret", "--set", "--seed", "example_inputs", "reference", "rtol",
                 "FILE.py[:KERNEL]"):
        assert word in out
