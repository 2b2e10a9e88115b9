"""tune.sass_control: a cubin's control bits read and edited in place, checked against
nvdisasm (test extras): the reuse bits are the `.reuse` flags it prints, and edits of
the stall and yield leave every instruction's disassembly as it was, so no opcode or
operand bit moved. On the GPU: safe edits run bit-exact, and stalls lowered to 0
(fault injection) fail the gate or the run."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import numpy as np
import pytest
from kernel_harness import cuda_tools

from tilevm.backend.ptxas import assemble
from tilevm.bench.examples import load_example
from tilevm.tune.sass_control import (
    MAX_STALL,
    Control,
    Cubin,
    CubinError,
    disassemble,
    same_instructions,
)
from tilevm.tune.variants import compiled_ptx

SETTINGS = {"d": 64, "causal": False, "block_q": 64, "block_kv": 64, "num_warps": 4}


def attention():
    module = load_example("attention")
    args, constants = module.example_inputs(np.random.default_rng(1), **dict(SETTINGS))
    return module.attention.specialize(**constants), args


def disassembly(cubin: Cubin, tmp_path: Path) -> list[str]:
    """nvdisasm's instruction lines, without their addresses."""
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin.data)
    out = subprocess.run([cuda_tools()[1], "-c", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return [line.split("*/", 1)[1].strip() for line in out.splitlines()
            if line.strip().startswith("/*") and ";" in line]


@pytest.fixture(scope="module")
def cubin():
    program, _ = attention()
    return Cubin(assemble(compiled_ptx(program, "sm_90a"), "sm_90a"))


def test_every_instruction_is_read_and_reuse_bits_match_nvdisasm(cubin, tmp_path):
    code = cubin.kernel("attention")
    lines = disassembly(cubin, tmp_path)
    assert len(code.words) == len(lines) > 1000
    controls = code.controls()
    assert [c.reuse != 0 for c in controls] == [".reuse" in line for line in lines]
    assert any(c.reuse for c in controls) and all(0 <= c.stall <= MAX_STALL
                                                   for c in controls)


def test_control_edits_leave_the_instructions_as_they_were(cubin):
    """(nvdisasm prints no `.reuse` on an instruction that lets the warp yield: the
    comparison leaves the flags out.)"""
    code = cubin.kernel("attention")
    lines = disassemble(cubin)
    rng = random.Random(4)
    picked = rng.sample(range(len(code.words)), 200)
    # with the yield bit clear every stall decodes (with it set, only 1-11: see below)
    edits = {i: Control(**{**code.control(i).__dict__,
                           "stall": MAX_STALL - code.control(i).stall, "yield_": 0})
             for i in picked}
    edited = cubin.with_controls("attention", edits)
    assert same_instructions(lines, edited)
    assert [edited.kernel("attention").control(i) for i in picked] == \
        [edits[i] for i in picked]
    changed = [i for i in range(len(code.words))
               if edited.kernel("attention").words[i] != code.words[i]]
    assert set(changed) <= set(picked)
    # only the bytes of the picked instructions moved
    diff = [k for k, (a, b) in enumerate(zip(cubin.data, edited.data)) if a != b]
    assert all((k - code.offset) // 16 in picked for k in diff)


def test_clearing_one_reuse_field_removes_that_instructions_reuse_flags(cubin, tmp_path):
    code = cubin.kernel("attention")
    lines = disassembly(cubin, tmp_path)
    i = next(k for k, c in enumerate(code.controls()) if c.reuse)
    edited = cubin.with_controls("attention",
                                 {i: Control(**{**code.control(i).__dict__, "reuse": 0})})
    after = disassembly(edited, tmp_path)
    assert after[i] == lines[i].replace(".reuse", "") and ".reuse" in lines[i]
    assert after[:i] + after[i + 1:] == lines[:i] + lines[i + 1:]


def test_nvdisasm_refuses_some_control_values_and_disassemble_says_so(cubin):
    code = cubin.kernel("attention")
    lines = disassemble(cubin)
    assert lines is not None and len(lines) == len(code.words)
    i = next(k for k, c in enumerate(code.controls()) if c.yield_ == 1)
    for stall, decodes in [(0, False), (1, True), (11, True), (12, False), (15, False)]:
        edited = cubin.with_controls("attention", {i: code.control(i).with_stall(stall)})
        assert same_instructions(lines, edited) == decodes, stall


def test_safe_edits_are_told_from_unsafe_ones():
    original = Control(stall=4, yield_=1, write_barrier=7, read_barrier=7, wait_mask=3,
                       reuse=0b0101)
    assert original.with_stall(6).is_safe_from(original)
    assert Control(**{**original.__dict__, "yield_": 0}).is_safe_from(original)
    assert Control(**{**original.__dict__, "reuse": 0b0001}).is_safe_from(original)
    assert not original.with_stall(3).is_safe_from(original)
    assert not Control(**{**original.__dict__, "reuse": 0b0111}).is_safe_from(original)
    assert not Control(**{**original.__dict__, "wait_mask": 1}).is_safe_from(original)
    with pytest.raises(ValueError, match="a stall is 0..15 cycles"):
        original.with_stall(16)


def test_bad_cubins_and_names_get_clear_errors(cubin):
    with pytest.raises(CubinError, match="not an ELF file"):
        Cubin(b"// PTX text, not a cubin" + bytes(64))
    with pytest.raises(CubinError, match="has no kernel 'matmul' \\(it has attention\\)"):
        cubin.kernel("matmul")
    with pytest.raises(IndexError, match="no instruction 99999"):
        cubin.with_controls("attention", {99999: cubin.kernel("attention").control(0)})
