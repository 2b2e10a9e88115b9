"""Every example kernel, and the quantized matmul for every weight type of the benchmark
list and both group sizes, compiles for sm_80 and sm_90 to PTX that ptxas accepts with
zero spill bytes; the quantized matmul's PTX uses tensor
cores (mma.sync), ldmatrix, cp.async and 16-byte global loads."""

from __future__ import annotations

from functools import cache

import pytest
from kernel_harness import (
    ROOT,
    SPILL_SLACK,
    compile_once,
    load_module,
    ptx_as_compiled_for,
    ptxas_report,
)

from tilevm import dtypes

EXAMPLES = ROOT / "examples"
ARCHES = ("sm_80", "sm_90")
# ../shared/BENCHMARKS.md's weight types (those whose values are all f16 values).
WEIGHT_TYPES = ("int2", "int3", "int4", "uint4", "int5", "int6", "int8", "uint2", "uint3",
                "f3e1m1", "f4e2m1", "f5e2m2", "f6e3m2", "f6e2m3", "f8e4m3", "f8e5m2")


@cache
def example(name: str):
    return load_module(EXAMPLES / f"{name}.py")


def compiled_without_spills(kernel, constants: dict, arch: str) -> str:
    ptx = compile_once(kernel.specialize(**constants), arch).ptx  # shared with other files
    report = ptxas_report(ptx, arch)[kernel.name]
    assert max(report.spill_stores, report.spill_loads) <= SPILL_SLACK, str(report)
    return ptx


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("name, kernel, constants", [
    ("vector_add", "vector_add", {}),
    ("softmax", "softmax_f32", {}),
    ("softmax", "softmax_f16", {}),
    ("matmul", "matmul", {}),
])
def test_example_compiles(name, kernel, constants, arch):
    ptx = compiled_without_spills(getattr(example(name), kernel), constants, arch)
    if name == "matmul":
        assert "mma.sync.aligned.m16n8k16" in ptx


def test_the_quantized_matmul_ptx_for_sm_80_and_sm_90_differs_only_in_its_target():
    """What lets the test below compile each (type, group size) once for both arches
    (`ptx_as_compiled_for`): the arch changes only ptxas' work, not the PTX."""
    program = example("quantized_matmul").quantized_matmul.specialize(
        wdtype=dtypes.parse("int3"), group_size=128)
    sm_80, sm_90 = (compile_once(program, arch).ptx for arch in ARCHES)
    assert ".target sm_80" in sm_80
    assert sm_80.replace(".target sm_80", ".target sm_90", 1) == sm_90


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("group_size", [32, 128])
@pytest.mark.parametrize("wdtype", WEIGHT_TYPES)
def test_quantized_matmul_compiles(wdtype, group_size, arch):
    kernel = example("quantized_matmul").quantized_matmul
    program = kernel.specialize(wdtype=dtypes.parse(wdtype), group_size=group_size)
    ptx = ptx_as_compiled_for(program, arch)  # (one compile for both arches: test above)
    report = ptxas_report(ptx, arch)[kernel.name]
    assert max(report.spill_stores, report.spill_loads) <= SPILL_SLACK, str(report)
    for needle in ("mma.sync.aligned.m16n8k16", "ldmatrix.sync.aligned", "cp.async.cg",
                   "ld.global.v4", "cp.async.wait_group"):
        assert needle in ptx, needle
