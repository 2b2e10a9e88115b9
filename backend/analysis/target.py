"""The GPU architectures the compiler targets: each `--arch` name and its PTX ISA
version (`TARGETS`), and the arch to compile for on a given device. Pure data, in the
bottom layer so that every layer reads it: the passes (`PassContext.target`), the LLVM
emission (`llvm.nvptx` makes PTX for it), the pipeline and the launcher."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """A GPU architecture: the `--arch` name, LLVM's CPU name and the PTX ISA version."""

    arch: str
    ptx_version: int  # e.g. 80 for PTX ISA 8.0

    @property
    def sm(self) -> int:
        return int(self.arch[3:5])

    @property
    def dependent_launch(self) -> bool:
        """Has programmatic dependent launch (`griddepcontrol`, PTX ISA 7.8): sm_90+."""
        return self.sm >= 90


# PTX ISA 8.0 (CUDA 12.0) is the floor: every listed arch, cp.async and mma are in it.
TARGETS: dict[str, Target] = {
    name: Target(name, 80) for name in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
}

#: The most shared memory one block may use on each arch (bytes: the opt-in maximum of
#: the CUDA C++ Programming Guide's table of compute capabilities). The verifier holds
#: every allocation to the largest (227 KiB, `ir.verify_context.MAX_SHARED_BYTES`); the
#: pipeline holds a program's whole plan to its target's.
SHARED_BYTES_PER_BLOCK: dict[str, int] = {
    "sm_80": 163 * 1024, "sm_86": 99 * 1024, "sm_89": 99 * 1024,
    "sm_90": 227 * 1024, "sm_90a": 227 * 1024,
}


def native_arch(device_arch: str) -> str:
    """The arch to compile for on a device of `device_arch`: its own, with the
    architecture-specific features (`a`) where the device has them (sm_90 -> sm_90a:
    wgmma; PTX for sm_90a loads only on sm_90 devices, which is where it runs)."""
    return f"{device_arch}a" if f"{device_arch}a" in TARGETS else device_arch


class TargetError(ValueError):
    """An unknown architecture, or LLVM refusing a module."""


def target(arch: str) -> Target:
    """The `Target` of `arch`, or `TargetError` naming the supported ones."""
    if arch not in TARGETS:
        raise TargetError(f"unknown GPU architecture {arch!r}; supported: "
                          f"{', '.join(TARGETS)}")
    return TARGETS[arch]
