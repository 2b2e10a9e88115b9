"""GPU targets and LLVM's NVPTX backend: LLVM IR text in, optimized PTX text out.

llvmlite (>= 0.50) carries LLVM 22 with the NVPTX target. Kernels are marked with the
`ptx_kernel` calling convention (LLVM >= 20) and use opaque pointers.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import llvmlite.binding as llvm

TRIPLE = "nvptx64-nvidia-cuda"
DATA_LAYOUT = "e-p6:32:32-i64:64-i128:128-v16:16-v32:32-n16:32:64"


@dataclass(frozen=True)
class Target:
    """A GPU architecture: the `--arch` name, LLVM's CPU name and the PTX ISA version."""

    arch: str
    ptx_version: int  # e.g. 80 for PTX ISA 8.0

    @property
    def sm(self) -> int:
        return int(self.arch[3:5])


# PTX ISA 8.0 (CUDA 12.0) is the floor: every listed arch, cp.async and mma are in it.
TARGETS: dict[str, Target] = {
    name: Target(name, 80) for name in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
}


def native_arch(device_arch: str) -> str:
    """The arch to compile for on a device of `device_arch`: its own, with the
    architecture-specific features (`a`) where the device has them (sm_90 -> sm_90a:
    wgmma; PTX for sm_90a loads only on sm_90 devices, which is where it runs)."""
    return f"{device_arch}a" if f"{device_arch}a" in TARGETS else device_arch


class TargetError(ValueError):
    """An unknown architecture, or LLVM refusing a module."""


def target(arch: str) -> Target:
    if arch not in TARGETS:
        raise TargetError(f"unknown GPU architecture {arch!r}; supported: "
                          f"{', '.join(TARGETS)}")
    return TARGETS[arch]


@functools.cache
def _initialize() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


@functools.cache
def _target_machine(arch: str, opt: int) -> llvm.TargetMachine:
    _initialize()
    t = target(arch)
    return llvm.Target.from_triple(TRIPLE).create_target_machine(
        cpu=t.arch, features=f"+ptx{t.ptx_version}", opt=opt)


def emit_ptx(llvm_ir: str, arch: str, opt: int = 3) -> str:
    """Verify and optimize an LLVM module (LLVM's O`opt` pipeline), then emit PTX."""
    _initialize()
    try:
        module = llvm.parse_assembly(llvm_ir)
        module.verify()
    except RuntimeError as err:
        raise TargetError(f"LLVM rejected the generated module: {err}") from None
    tm = _target_machine(arch, opt)
    if opt:
        tuning = llvm.create_pipeline_tuning_options(speed_level=opt)
        builder = llvm.create_pass_builder(tm, tuning)
        builder.getModulePassManager().run(module, builder)
    return tm.emit_assembly(module)
