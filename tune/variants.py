"""Kernels whose PTX is a variant of what the compiler emitted for a program: a
reordering (`ptx_order`), loaded from text beside the compiled kernel, never cached; or
whose machine code is (`machine_code_variant`: a cubin with edited control bits,
`sass_control`).

    ptx = compiled_ptx(program)
    kernel = ptx_variant(program, PtxOrder.parse(ptx).permuted(random.Random(1)))

The variant keeps the compiled kernel's signature, threads and shared bytes: it must be
the same kernel up to the order of its instructions (a different PTX text of the same
entry). A text ptxas rejects raises the loader's `ModuleLoadError`.
"""

from __future__ import annotations

import dataclasses

from tilevm.backend import cache
from tilevm.backend.cuda.kernel import Kernel
from tilevm.backend.cuda.module import load_artifact
from tilevm.backend.launch import build_artifact, cache_key, current_arch
from tilevm.ir.stmt import Program

__all__ = ["compiled_ptx", "ptx_variant", "machine_code_variant"]


def _artifact(program: Program, arch: str | None) -> cache.Artifact:
    arch = arch or current_arch()
    return cache.get_or_build(cache_key(program, arch), lambda: build_artifact(program, arch))


def compiled_ptx(program: Program, arch: str | None = None) -> str:
    """The PTX the compiler emits for `program` and `arch` (default: the current
    device's), from the kernel cache."""
    return _artifact(program, arch).ptx


def ptx_variant(program: Program, ptx: str, arch: str | None = None) -> Kernel:
    """`program`'s kernel loaded from `ptx` in place of the compiled text."""
    return load_artifact(dataclasses.replace(_artifact(program, arch), ptx=ptx))


def machine_code_variant(program: Program, cubin: bytes, arch: str | None = None) -> Kernel:
    """`program`'s kernel loaded from `cubin`, machine code of its PTX (or of a variant)."""
    return load_artifact(_artifact(program, arch), cubin=cubin)
