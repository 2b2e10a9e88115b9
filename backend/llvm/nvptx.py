"""LLVM's NVPTX backend: LLVM IR text in, optimized PTX text out.

llvmlite (>= 0.50) carries LLVM 22 with the NVPTX target. Kernels are marked with the
`ptx_kernel` calling convention (LLVM >= 20) and use opaque pointers. The architectures
and their PTX ISA versions are `tilevm.backend.analysis.target`'s.
"""

from __future__ import annotations

import functools

import llvmlite.binding as llvm

from tilevm.backend.analysis.target import TargetError, target

TRIPLE = "nvptx64-nvidia-cuda"
DATA_LAYOUT = "e-p6:32:32-i64:64-i128:128-v16:16-v32:32-n16:32:64"


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
