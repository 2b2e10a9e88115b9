"""backend/ptxas.py: finding ptxas, resource reports, and errors, on hand-written PTX."""

from __future__ import annotations

import os
import stat
import sys

import pytest
from kernel_harness import PROGRAMS

from tilevm.backend import ptxas
from tilevm.backend.ptxas import (
    SUPPORTED_ARCHS,
    PtxasNotFoundError,
    PTXError,
    check_ptx,
    find_ptxas,
    parse_report,
)

ADD_ONE = (PROGRAMS / "add_one.ptx").read_text()

SHARED = """\
.version 8.0
.target sm_80
.address_size 64

.visible .entry uses_smem(.param .u64 p)
{
    .shared .align 4 .b32 buf[256];
    .reg .b32 %r<4>;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, buf;
    st.shared.u32 [%r2], %r1;
    ret;
}
"""


def spilling_ptx(n: int = 48) -> str:
    """`n` volatile loads all live at once under `.maxnreg 24`: ptxas must spill."""
    lines = [".version 8.0", ".target sm_80", ".address_size 64",
             ".visible .entry spills(.param .u64 p)", ".maxnreg 24", "{",
             f"    .reg .f32 %f<{n + 1}>;", "    .reg .b64 %rd<3>;",
             "    ld.param.u64 %rd1, [p];", "    cvta.to.global.u64 %rd2, %rd1;"]
    lines += [f"    ld.volatile.global.f32 %f{i}, [%rd2+{4 * i}];" for i in range(n)]
    lines += [f"    st.volatile.global.f32 [%rd2+{4 * i}], %f{i};" for i in reversed(range(n))]
    lines += ["    ret;", "}", ""]
    return "\n".join(lines)


BAD = ADD_ONE.replace("add.f32 %f2, %f1, 0f3F800000;", "add.f32 %f2, %f1, %f9;")


@pytest.fixture(scope="module")
def have_ptxas() -> str:
    # ptxas comes with the test extras (nvidia-cuda-nvcc): missing, it is a failure.
    return find_ptxas()


def test_valid_kernel_reports_registers(have_ptxas: str) -> None:
    report = check_ptx(ADD_ONE, "sm_80")
    k = report["add_one"]
    assert list(report.kernels) == ["add_one"]
    assert k.entry and 4 <= k.registers <= 64
    assert (k.spill_stores, k.spill_loads, k.stack_frame, k.shared_bytes) == (0, 0, 0, 0)
    assert not report.has_spills and report.spill_bytes == 0
    assert report.arch == "sm_80" and report.ptxas == have_ptxas
    assert "add_one" in str(report)


def test_spills_are_reported(have_ptxas: str) -> None:
    k = check_ptx(spilling_ptx(), "sm_80")["spills"]
    assert k.spill_stores > 0 and k.spill_loads > 0
    assert k.stack_frame >= k.spill_stores
    assert k.registers <= 24


def test_max_registers_option(have_ptxas: str) -> None:
    # the same kernel without .maxnreg does not spill; a register cap makes it spill
    text = spilling_ptx().replace(".maxnreg 24\n", "")
    assert check_ptx(text, "sm_80")["spills"].spill_bytes == 0
    assert check_ptx(text, "sm_80", max_registers=24)["spills"].spill_bytes > 0


def test_static_shared_memory(have_ptxas: str) -> None:
    assert check_ptx(SHARED, "sm_90")["uses_smem"].shared_bytes == 1024


def test_device_function_and_two_kernels(have_ptxas: str) -> None:
    text = """\
.version 8.0
.target sm_80
.address_size 64
.func (.reg .b32 r) twice(.reg .b32 a)
{
    add.s32 r, a, a;
    ret;
}
.visible .entry first(.param .u64 p)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [p];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    call (%r2), twice, (%r1);
    st.global.u32 [%rd2], %r2;
    ret;
}
.visible .entry second()
{
    ret;
}
"""
    report = check_ptx(text, "sm_89")
    assert set(report.kernels) == {"first", "second"}
    assert len(report) == 2 and {k.name for k in report} == {"first", "second"}
    if "twice" in report.functions:  # ptxas may inline it
        assert not report["twice"].entry


def test_invalid_ptx_raises_with_message_and_line(have_ptxas: str) -> None:
    with pytest.raises(PTXError) as info:
        check_ptx(BAD, "sm_80")
    msg = str(info.value)
    assert "%f9" in msg  # ptxas' own message: unknown symbol
    assert "add.f32 %f2, %f1, %f9;" in msg  # the offending PTX line, quoted
    assert "line 27" in msg and "sm_80" in msg
    assert info.value.errors and "error" in info.value.log
    assert "<ptx>" in info.value.log  # the temporary file's path is not shown
    assert info.value.arch == "sm_80"


@pytest.mark.parametrize("arch", SUPPORTED_ARCHS)
def test_every_supported_arch(have_ptxas: str, arch: str) -> None:
    report = check_ptx(ADD_ONE, arch)
    assert report.arch == arch and report["add_one"].registers > 0


def test_unsupported_arch() -> None:
    with pytest.raises(ValueError, match="sm_80, sm_86"):
        check_ptx(ADD_ONE, "sm_75")


def test_not_text() -> None:
    with pytest.raises(TypeError):
        check_ptx(ADD_ONE.encode(), "sm_80")  # type: ignore[arg-type]


def test_parse_report_from_log() -> None:
    log = """\
ptxas info    : 0 bytes gmem
ptxas warning : For entry k adjusting per thread register count of 16 to lower bound of 24
ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
    160 bytes stack frame, 156 bytes spill stores, 152 bytes spill loads
ptxas info    : Used 24 registers, used 1 barriers, 160 bytes cumulative stack size, \
2048 bytes smem, 360 bytes cmem[0]
ptxas info    : Compile time = 6.013 ms
ptxas info    : Compiling entry function 'j' for 'sm_80'
ptxas info    : Function properties for j
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, 364 bytes cmem[0]
ptxas info    : Function properties for helper
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
"""
    r = parse_report(log, "sm_80")
    k = r["k"]
    assert (k.registers, k.barriers, k.stack_frame, k.spill_stores, k.spill_loads,
            k.shared_bytes, k.cmem0) == (24, 1, 160, 156, 152, 2048, 360)
    assert r["j"].registers == 10 and r["j"].spill_bytes == 0 and r["j"].cmem0 == 364
    assert not r["helper"].entry and r["helper"].spill_bytes == 8
    assert r.spill_bytes == 308 + 8
    assert len(r.warnings) == 1 and "register count" in r.warnings[0]
    with pytest.raises(KeyError, match="known: k, j, helper"):
        r["nope"]


def test_performance_advisories_are_reported_as_warnings() -> None:
    """ptxas's "Potential Performance Loss" info lines (here: every wgmma of a kernel
    serialized) reach the report's warnings, so `vmc compile --check` shows them."""
    log = """\
ptxas info    : (C7513) Potential Performance Loss: wgmma.mma_async instructions are \
serialized due to non wgmma instructions defining input registers of a wgmma between \
start and end of the pipeline stage in the function 'k'
ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Used 200 registers, used 1 barriers
ptxas info    : Compile time = 6.013 ms
"""
    r = parse_report(log, "sm_90a")
    assert r.warnings == ("(C7513) Potential Performance Loss: wgmma.mma_async "
                          "instructions are serialized due to non wgmma instructions "
                          "defining input registers of a wgmma between start and end of "
                          "the pipeline stage in the function 'k'",)
    assert "warning: (C7513)" in str(r) and r["k"].registers == 200


# ---- finding ptxas ----------------------------------------------------------------------------

def _fake_exe(path: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/bin/sh\necho fake\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


def test_env_variable_wins(tmp_path, monkeypatch) -> None:
    exe = _fake_exe(str(tmp_path / "bin" / "ptxas"))
    monkeypatch.setenv("TILEVM_PTXAS", exe)
    assert find_ptxas() == exe


def test_env_variable_must_exist(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TILEVM_PTXAS", str(tmp_path / "missing"))
    with pytest.raises(PtxasNotFoundError, match="TILEVM_PTXAS"):
        find_ptxas()


def test_found_in_wheel(tmp_path, monkeypatch) -> None:
    exe = _fake_exe(str(tmp_path / "site" / "nvidia" / "cu13" / "bin" / "ptxas"))
    monkeypatch.delenv("TILEVM_PTXAS", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(ptxas.shutil, "which", lambda name: None)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    real = ptxas._is_executable
    monkeypatch.setattr(ptxas, "_is_executable",
                        lambda p: real(p) and not p.startswith("/usr/local/cuda"))
    assert os.path.realpath(find_ptxas()) == os.path.realpath(exe)


def test_cuda_12_wheel_layout(tmp_path, monkeypatch) -> None:
    exe = _fake_exe(str(tmp_path / "site" / "nvidia" / "cuda_nvcc" / "bin" / "ptxas"))
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    found = [os.path.realpath(p) for p in ptxas._wheel_candidates()]
    assert os.path.realpath(exe) in found


def test_missing_ptxas_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.delenv("TILEVM_PTXAS", raising=False)
    monkeypatch.setattr(ptxas.shutil, "which", lambda name: None)
    monkeypatch.setattr(ptxas, "_wheel_candidates", lambda: [])
    monkeypatch.setattr(ptxas, "_is_executable", lambda path: False)
    with pytest.raises(PtxasNotFoundError, match="nvidia-cuda-nvcc"):
        find_ptxas()
    with pytest.raises(PtxasNotFoundError):
        check_ptx(ADD_ONE, "sm_80")


def test_version(have_ptxas: str) -> None:
    version = ptxas.ptxas_version()
    assert version[0].isdigit() and "." in version
