"""Every VMError from the user's code points at its line (docs/language.md, "Errors point
at your line"): errors about the kernel's signature at the decorator line, errors about
the grid or the producer warp at the line that set them, a library function misused
outside a kernel at the calling line. Kernels are written to files (their source must
be readable), and each test finds the offending line by its text."""

from __future__ import annotations

import importlib.util
import itertools
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tilevm.backend.analysis.signature import Signature, signature_from_program
from tilevm.backend.cuda.validate import grid_for
from tilevm.backend.passes.split_producer_warp import split_producer_warp
from tilevm.ir.errors import VMError
from tilevm.vm import interpreter

_count = itertools.count()


def load(tmp_path: Path, source: str, header: str = ""):
    """The module written from `source` (after `header` and an `import tilevm as tv`)."""
    path = tmp_path / f"kernel_{next(_count)}.py"
    path.write_text(header + "import tilevm as tv\n" + textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def raised_at(err: pytest.ExceptionInfo, source_text: str, message: str) -> None:
    """The error's line holds `source_text`, and its message is `message` exactly."""
    e = err.value
    assert e.loc is not None, f"no line: {e.message}"
    line = Path(e.loc.file).read_text().splitlines()[e.loc.line - 1]
    assert source_text in line, (e.loc, line)
    assert e.message == message


def test_num_warps_of_the_decorator_is_an_error_at_the_decorator(tmp_path: Path) -> None:
    with pytest.raises(VMError) as err:
        load(tmp_path, """
            @tv.kernel(num_warps=0)
            def k(n: tv.int32):
                tv.grid(1)
            """)
    raised_at(err, "@tv.kernel(num_warps=0)", "num_warps must be an int in 1..32, got 0")


def test_num_warps_constant_is_an_error_at_the_decorator(tmp_path: Path) -> None:
    m = load(tmp_path, """
        @tv.kernel
        def k(n: tv.int32, *, num_warps=4):
            tv.grid(1)
        """)
    with pytest.raises(VMError) as err:
        m.k.specialize(num_warps=64)
    raised_at(err, "@tv.kernel", "num_warps must be an int in 1..32, got 64")


@pytest.mark.parametrize("future", [False, True])
def test_pointer_annotation_with_a_bad_dtype_is_an_error_at_the_def(tmp_path: Path,
                                                                    future: bool) -> None:
    # evaluated when the def runs, or (postponed annotations) when the kernel reads it
    header = "from __future__ import annotations\n" if future else ""
    with pytest.raises(VMError) as err:
        m = load(tmp_path, """
            @tv.kernel
            def k(x: tv.ptr("f99")):
                tv.grid(1)
            """, header)
        m.k.specialize()
    assert err.value.loc is not None
    line = Path(err.value.loc.file).read_text().splitlines()[err.value.loc.line - 1]
    assert ("@tv.kernel" if future else "def k(") in line
    assert "tv.ptr: unknown data type 'f99'" in err.value.message


@pytest.mark.parametrize("extent", [0, -1])
def test_a_constant_grid_extent_below_one_is_an_error_at_tv_grid(tmp_path: Path,
                                                                  extent: int) -> None:
    m = load(tmp_path, f"""
        @tv.kernel
        def k(n: tv.int32):
            x = n + 1
            tv.grid({extent})
        """)
    with pytest.raises(VMError) as err:
        m.k.interpret(1)
    raised_at(err, "tv.grid(", f"grid dimension 0 is {extent}; it must be >= 1")


def test_grid_checks_of_the_interpreter_are_at_tv_grid(tmp_path: Path) -> None:
    m = load(tmp_path, """
        @tv.kernel
        def k(n: tv.int32):
            x = n + 1
            tv.grid(n)
        """)
    with pytest.raises(VMError) as err:
        m.k.interpret(-3)
    raised_at(err, "tv.grid(n)", "kernel k: grid dimension 0 (n) is -3, not a non-negative "
                                 "integer")
    with pytest.raises(VMError) as err:
        interpreter.run(m.k.specialize(), [5], max_blocks=4)
    assert err.value.loc is not None and err.value.loc.line == 6  # tv.grid(n)
    assert err.value.message.startswith(
        "kernel k: the grid (5,) has 5 blocks, more than the interpreter runs (4)")


def test_grid_checks_of_a_compiled_launch_are_at_tv_grid(tmp_path: Path) -> None:
    """The launch path (`grid_for`, before anything reaches the GPU) points at tv.grid
    as the interpreter does, also after the signature went through the disk cache."""
    m = load(tmp_path, """
        @tv.kernel
        def k(n: tv.int32):
            x = n + 1
            tv.grid(n, 2)
        """)
    signature = signature_from_program(m.k.specialize())
    for sig in (signature, Signature.from_json(signature.to_json())):
        assert grid_for(sig, [5]) == (5, 2, 1)
        with pytest.raises(VMError) as err:
            grid_for(sig, [-3])
        raised_at(err, "tv.grid(n, 2)", "kernel k: grid dimension 0 (n) is -3 for these "
                                         "arguments (0 to 2147483647)")
    m = load(tmp_path, """
        @tv.kernel
        def k(n: tv.int32):
            tv.grid(1, n)
        """)
    with pytest.raises(VMError) as err:
        grid_for(signature_from_program(m.k.specialize()), [70_000])
    raised_at(err, "tv.grid(1, n)", "kernel k: grid dimension 1 (n) is 70000 for these "
                                     "arguments (0 to 65535)")


def test_cluster_grid_mismatch_is_at_tv_grid(tmp_path: Path) -> None:
    m = load(tmp_path, """
        @tv.kernel
        def k(x: tv.ptr("f32")):
            tv.grid(3)
            tv.cluster(2)
        """)
    with pytest.raises(VMError) as err:
        m.k.interpret(np.zeros(4, np.float32))
    raised_at(err, "tv.grid(3)", "kernel k runs in clusters of 2 blocks along the grid's "
                                 "first dimension, but that dimension (3) is 3, not a "
                                 "multiple of 2")


def test_a_program_the_producer_warp_cannot_split_is_at_tv_producer_warp(
        tmp_path: Path) -> None:
    m = load(tmp_path, """
        @tv.kernel
        def k(x: tv.ptr("f32")):
            tv.grid(1)
            tv.producer_warp()
            t = tv.zeros([128], tv.f32)
        """)
    with pytest.raises(VMError) as err:
        split_producer_warp(m.k.specialize())
    raised_at(err, "tv.producer_warp()", "tv.producer_warp(): the program has no copy_async "
                                         "for the producer warp to issue")


def test_misuse_outside_a_kernel_is_at_the_calling_line(tmp_path: Path) -> None:
    with pytest.raises(VMError) as err:
        load(tmp_path, "tile = tv.zeros([4])\n")
    raised_at(err, "tile = tv.zeros([4])", "tv.full can only be used inside a @tv.kernel "
              "function, while the kernel is compiled (kernel.specialize(...) or "
              "kernel.interpret(...))")
    with pytest.raises(VMError) as err:
        load(tmp_path, "decorated = tv.kernel(5)\n")
    raised_at(err, "decorated = tv.kernel(5)", "@tv.kernel decorates a function, got int 5")
    m = load(tmp_path, """
        @tv.kernel
        def k(n: tv.int32):
            tv.grid(1)
        """)
    with pytest.raises(VMError) as err:
        m.k(1)  # called directly
    assert err.value.loc is not None and err.value.loc.file == __file__
    assert err.value.message.startswith("a kernel is not called directly")


def test_errors_while_tracing_and_after_are_at_their_statement(tmp_path: Path) -> None:
    # one per family: a bad constant, shape, dtype, layout, a tv.range misuse, dot shapes,
    # a Python error, a limit found by the verifier
    cases = [
        ("t = tv.full([32], 300, tv.int8)", "the constant 300 does not fit int8 ([-128, 127])"),
        ("t = tv.zeros([-1], tv.f32)", "tv.full shape[0] must be positive, got -1"),
        ("t = tv.zeros([32], tv.f32, layout=5)",
         "tv.full: a register tile needs a RegisterLayout, got int 5"),
        ("for i in tv.range(0, n, 0): pass", "tv.range step must not be zero"),
        ("c = tv.dot(tv.zeros([16, 16], tv.f16), tv.zeros([32, 16], tv.f16))",
         "tv.dot: shapes [16, 16] and [32, 16] do not multiply"),
        ("t = tv.zeros()", "TypeError: zeros() missing 1 required positional argument: "
                           "'shape'"),
    ]
    for statement, message in cases:
        m = load(tmp_path, f"""
            @tv.kernel
            def k(n: tv.int32):
                tv.grid(1)
                {statement}
            """)
        with pytest.raises(VMError) as err:
            m.k.specialize()
        raised_at(err, statement, message)
    m = load(tmp_path, """
        @tv.kernel
        def k(n: tv.int32):
            tv.grid(1)
            big = tv.zeros([2**40], tv.f32)
        """)
    with pytest.raises(VMError) as err:
        m.k.interpret(1)
    assert err.value.loc is not None and err.value.loc.line == 6


def test_runtime_argument_errors_name_the_parameter(tmp_path: Path) -> None:
    m = load(tmp_path, """
        @tv.kernel
        def k(x: tv.ptr("f32"), n: tv.int8):
            tv.grid(1)
        """)
    x = np.zeros(4, np.float32)
    for args, name in [((x, 1000), "n: int8"), ((x, "a"), "n: int8"), (("a", 1), "x: ptr<f32>"),
                       ((np.zeros(4, np.int64), 1), "x: ptr<f32>")]:
        with pytest.raises(VMError, match=f"argument [01] \\({name}\\)"):
            m.k.interpret(*args)
    with pytest.raises(VMError, match="missing runtime argument n"):
        m.k.interpret(x)
