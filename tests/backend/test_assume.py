"""`tv.assume(cond)`: the `assume` instruction (verifier, interpreter, text form), the
frontend, the divisibility facts codegen takes from it (vector accesses of rows with a
runtime stride), and the runtime's check of the arguments before launch."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from kernel_harness import PROGRAMS, load_module

from tilevm.backend.analysis.divisibility import assumed_divisors
from tilevm.backend.analysis.signature import Signature, signature_from_program
from tilevm.backend.cuda.errors import ArgumentValueError
from tilevm.backend.cuda.validate import grid_for, validate_args
from tilevm.backend.pipeline import compile_program
from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.expr import INT32, Binary, Var, const
from tilevm.ir.parser import parse_program
from tilevm.ir.printer import format_program
from tilevm.ir.stmt import Program, Seq
from tilevm.ir.verifier import verify

KERNELS = PROGRAMS / "assume_kernels.py"




kernels = load_module(KERNELS)


def _line(text: str) -> int:
    """The line of the kernels file that holds `text`."""
    for i, line in enumerate(KERNELS.read_text().splitlines(), 1):
        if text in line:
            return i
    raise AssertionError(text)


def _body(program: Program, **changes) -> Program:
    return replace(program, body=Seq(body=changes["body"]))


# ---- the instruction ------------------------------------------------------------------------

def test_frontend_emits_assume_at_the_users_line():
    program = kernels.add_2d_assumed.specialize()
    first = program.body.body[0]
    assert isinstance(first, ins.Assume)
    assert first.loc.line == _line("tv.assume(N % 4 == 0)")
    verify(program)
    assert not any(isinstance(s, ins.Assume)
                   for s in kernels.add_2d_assumed.specialize(assume=False).body.body)


def test_verifier_rejects_a_non_bool_condition():
    program = kernels.add_2d_assumed.specialize()
    n = next(p for p in program.params if getattr(p, "name", "") == "N")
    bad = ins.Assume(cond=Binary("%", n, const(4)))
    with pytest.raises(VMError, match="assume: the condition .* must be bool"):
        verify(_body(program, body=(bad, *program.body.body[1:])))


def test_text_round_trip():
    program = kernels.copy_assumed.specialize()
    text = format_program(program)
    assert "assume cond=" in text
    parsed = parse_program(text)
    assert format_program(parsed) == text
    assert [s for s in parsed.body.body if isinstance(s, ins.Assume)] == \
        [s for s in program.body.body if isinstance(s, ins.Assume)]


# ---- the interpreter ---------------------------------------------------------------------------

def test_interpreter_true_runs():
    x = np.arange(256, dtype=np.float32)
    y = np.zeros(256, np.float32)
    kernels.copy_assumed.interpret(x, y, 256, 1)
    assert np.array_equal(x, y)


@pytest.mark.parametrize("n, k", [(250, 1), (256, 0)])
def test_interpreter_false_names_condition_and_line(n, k):
    x, y = np.zeros(n, np.float32), np.zeros(n, np.float32)
    with pytest.raises(VMError) as info:
        kernels.copy_assumed.interpret(x, y, n, k)
    err = info.value
    assert "does not hold" in err.message and "n % 8" in err.message
    assert f"n = {n}" in err.message and f"k = {k}" in err.message
    assert err.loc.line == _line("tv.assume((n % 8 == 0) & (k > 0))")


def test_interpreter_checks_each_time_the_point_is_reached():
    x = np.zeros(32, np.float32)
    with pytest.raises(VMError, match=r"i < 2.*does not hold.*i = 2"):
        kernels.assume_in_loop.interpret(x, 32)


def test_compile_time_conditions():
    # True is a no-op (no instruction); False fails while the kernel is specialized.
    program = kernels.copy_assumed.specialize(cond=True)
    assert not any(isinstance(s, ins.Assume) for s in program.body.body)
    with pytest.raises(VMError, match="assume.*false at compile time") as info:
        kernels.copy_assumed.specialize(cond=False)
    assert info.value.loc.line == _line("tv.assume(cond)")


@pytest.mark.parametrize("kernel, message", [
    (kernels.assume_tile, "needs a scalar condition"),
    (kernels.assume_int, "needs a bool condition"),
])
def test_frontend_rejects_non_conditions(kernel, message):
    with pytest.raises(VMError, match=message):
        kernel.specialize()


# ---- codegen ---------------------------------------------------------------------------------

def test_divisibility_facts():
    program = kernels.copy_assumed.specialize()
    assert assumed_divisors(program) == {"n": 8}
    n = Var("n", INT32)
    facts = [Binary("==", const(0), Binary("%", n, const(3))),
             Binary("==", Binary("&", n, const(15)), const(0)),
             Binary("==", Binary("%", n, const(8)), const(1)),  # not a divisibility fact
             Binary("==", Binary("&", n, const(6)), const(0))]  # not a power-of-two mask
    body = tuple(ins.Assume(cond=c) for c in facts)
    assert assumed_divisors(_body(program, body=body + program.body.body)) == {"n": 48}


def test_assumed_row_stride_gets_vector_accesses():
    # Without the assume the row stride N is not provably a multiple of 4 elements.
    ptx = compile_program(kernels.add_2d_assumed.specialize(assume=False), "sm_90").ptx
    assert "ld.global.v" not in ptx and "st.global.v" not in ptx
    ptx = compile_program(kernels.add_2d_assumed.specialize(), "sm_90").ptx
    assert "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx


# ---- the runtime -------------------------------------------------------------------------------

class _FakeBuffer:
    """A CUDA-array-interface object: enough for validate_args, which needs no GPU."""

    def __init__(self, n: int, readonly: bool = False) -> None:
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "strides": None,
                                         "data": (1 << 20, readonly), "version": 3}


def test_signature_has_top_level_assumptions_and_survives_json():
    sig = signature_from_program(kernels.copy_assumed.specialize())
    assert len(sig.assumptions) == 1
    assert sig.assumptions[0].where.endswith(f":{_line('tv.assume((n % 8 == 0) & (k > 0))')}")
    again = Signature.from_json(sig.to_json())
    assert again == sig


def test_runtime_rejects_violating_args_before_launch():
    sig = signature_from_program(kernels.add_2d_assumed.specialize())
    M, N = 8, 32
    ok = [_FakeBuffer(M * N, True), _FakeBuffer(M * N, True), _FakeBuffer(M * N), M, N]
    validate_args(sig, ok)
    assert grid_for(sig, ok) == (1, 1, 1)
    N = 17
    bad = [_FakeBuffer(M * N, True), _FakeBuffer(M * N, True), _FakeBuffer(M * N), M, N]
    with pytest.raises(ArgumentValueError) as info:
        validate_args(sig, bad)
    line = _line("tv.assume(N % 4 == 0)")
    assert info.value.message == "kernel add_2d_assumed assumes (N % 4) == 0, but N = 17"
    assert info.value.loc is not None and info.value.loc.line == line
    assert info.value.loc.file.endswith("assume_kernels.py")
    assert "tv.assume(N % 4 == 0)" in str(info.value)  # the user's line, quoted
    with pytest.raises(ArgumentValueError):
        grid_for(sig, bad)


def test_runtime_checks_conjunctions():
    sig = signature_from_program(kernels.copy_assumed.specialize())
    validate_args(sig, [_FakeBuffer(256, True), _FakeBuffer(256), 256, 3])
    with pytest.raises(ArgumentValueError, match=r"but k = 0, n = 256"):
        validate_args(sig, [_FakeBuffer(256, True), _FakeBuffer(256), 256, 0])


# ---- on the GPU ----------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("M, N", [(16, 32), (17, 44), (100, 4), (33, 100)])
def test_gpu_assumed_kernel_matches_interpreter(M, N):
    from tilevm.backend.launch import launch_program

    rng = np.random.default_rng(M * N)
    a, b = (rng.standard_normal((M, N)).astype(np.float32) for _ in range(2))
    expected = np.full((M, N), np.nan, np.float32)
    kernels.add_2d_assumed.interpret(a, b, expected, M, N)
    got = np.full((M, N), np.nan, np.float32)
    launch_program(kernels.add_2d_assumed.specialize(), [a, b, got, M, N])
    assert np.array_equal(got, expected) and np.array_equal(got, a + b)


@pytest.mark.gpu
def test_gpu_launch_rejects_a_broken_assumption():
    from tilevm.backend.launch import launch_program

    M, N = 4, 18
    a = np.zeros((M, N), np.float32)
    with pytest.raises(ArgumentValueError, match="but N = 18"):
        launch_program(kernels.add_2d_assumed.specialize(), [a, a.copy(), a.copy(), M, N])
