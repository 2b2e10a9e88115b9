"""`atomic_add`: its text form, the verifier's and frontend's rules, the interpreter (blocks
in order), the PTX it lowers to, and on the GPU (marked `gpu`) the last-block pattern of
split-K against numpy, with blocks racing for real."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import PROGRAMS, load_module

from tilevm.backend import ptxas
from tilevm.backend.pipeline import compile_program
from tilevm.ir.builder import Builder
from tilevm.ir.errors import VMError
from tilevm.ir.parser import parse_program
from tilevm.ir.printer import format_program
from tilevm.ir.verifier import verify
from tilevm.vm import lang as tv

k = load_module(PROGRAMS / "atomic_kernels.py")


def _last_block_args(N: int, parts: int, rng: np.random.Generator) -> list:
    x = rng.uniform(-1, 1, (parts, N)).astype(np.float32)
    tiles = -(-N // 64)
    return [x, np.full((parts, N), np.nan, np.float32), np.zeros(tiles, np.int32),
            np.full((1, N), np.nan, np.float32), np.full((parts, tiles), -1, np.int32), N]


def test_text_form_reads_back():
    program = k.last_block_sums.specialize(parts=3)
    text = format_program(program)
    assert "let arrived: int32 = atomic_add dst=%count, offsets=(block_idx.x,), value=1" \
        in text
    assert parse_program(text) == program


def test_interpreter_runs_blocks_in_order():
    args = _last_block_args(200, 3, np.random.default_rng(0))
    k.last_block_sums.interpret(*args, parts=3)
    x, _, counters, y, order, _ = args
    np.testing.assert_allclose(y[0], 2 * x.astype(np.float64).sum(0), rtol=1e-6)
    assert not counters.any()
    assert (order == np.arange(3)[:, None]).all()  # block (c, p) came p-th


def test_interpreter_adds_with_int32_wraparound():
    totals = np.array([2**31 - 1, 0, 0, 0], np.int32)
    k.add_at.interpret(totals, 0)
    assert totals[0] == -2**31


def test_interpreter_reports_an_element_outside():
    with pytest.raises(VMError, match=r"atomic_add: the element at \[4\] is outside"):
        k.add_at.interpret(np.zeros(4, np.int32), 4)


def _program(dtype: str = "int32", readonly: bool = False):
    b = Builder("bad", num_warps=1)
    p = b.pointer_param("c", dtype, readonly)
    view = b.global_view(p, [4])
    old = b.atomic_add(view, [0], 1)
    return b, old


@pytest.mark.parametrize("dtype, readonly, message", [
    ("f32", False, "atomic_add works on int32"),
    ("int32", True, "read-only parameter c"),
])
def test_verifier_rejects(dtype, readonly, message):
    b, _ = _program(dtype, readonly)
    with pytest.raises(VMError, match=message):
        verify(b.build())


def test_verifier_rejects_updating_the_result():
    b, old = _program()
    b.assign_var(old, 3)
    with pytest.raises(VMError, match="an atomic_add's result"):
        verify(b.build())


def test_frontend_rejects_a_tile_value_and_float_tensors():
    @tv.kernel(num_warps=1)
    def tile_value(c: tv.ptr(tv.int32)):
        tv.atomic_add(tv.global_view(c, [4]), [0], tv.zeros([1], tv.int32))

    @tv.kernel(num_warps=1)
    def float_counter(c: tv.ptr(tv.f32)):
        tv.atomic_add(tv.global_view(c, [4]), [0])

    with pytest.raises(VMError, match="value must be an integer scalar"):
        tile_value.specialize()
    with pytest.raises(VMError, match="needs an int32 tensor, got f32"):
        float_counter.specialize()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptx_one_atomic_between_barriers(arch):
    compiled = compile_program(k.last_block_sums.specialize(parts=4), arch)
    ptx = compiled.ptx
    # the old value goes to the block through 16 bytes of the dynamic buffer (no static
    # shared variable, which would push the buffer's aligned start up)
    assert compiled.shared_bytes == 16 and ".shared .align 4 .u32" not in ptx
    assert ptx.count("atom.acq_rel.gpu.add.u32") == 1
    atom = ptx.index("atom.acq_rel.gpu")
    assert "bar.sync" in ptx[:atom] and "bar.sync" in ptx[atom:]
    assert ptxas.check_ptx(ptx, arch)["last_block_sums"].spill_bytes == 0


# ---- on the GPU -------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("N, parts", [(64 * 300, 8), (1000, 3)])
def test_gpu_last_block_sums_every_part(N, parts):
    from tilevm.backend.launch import launch_program

    rng = np.random.default_rng(N)
    program = k.last_block_sums.specialize(parts=parts)
    args = _last_block_args(N, parts, rng)
    for _ in range(3):  # the counters come back to zero: the next launch works alike
        args[3][:] = np.nan
        args[4][:] = -1
        launch_program(program, args)
        x, _, counters, y, order, _ = args
        # f32 additions in some order: `parts` roundings of at most sum |2x| each
        bound = parts * 2.0**-24 * 2 * np.abs(x.astype(np.float64)).sum(0)
        assert (np.abs(y[0] - 2 * x.astype(np.float64).sum(0)) <= bound).all()
        assert not counters.any()
        # each column's blocks counted in once each, in whatever order they ran
        assert (np.sort(order, axis=0) == np.arange(parts)[:, None]).all()


@pytest.mark.gpu
def test_gpu_concurrent_additions_are_exact():
    from tilevm.backend.launch import launch_program

    n = 5
    totals = np.zeros(n, np.int32)
    launch_program(k.add_block_index.specialize(), [totals, n])
    b = np.arange(64 * n)
    assert (totals == np.bincount(b % n, weights=b + 1).astype(np.int64)).all()
