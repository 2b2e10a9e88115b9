"""Kernels whose PTX is a variant of what the compiler emitted for a program: a
reordering (`ptx_order`), loaded from text beside the compiled kernel, never cached; or
whose machine code is (`machine_code_variant`: a cubin with edited control bits,
`sass_control`).

    ptx = compiled_ptx(program)
    kernel = ptx_variant(program, PtxOrder.parse(ptx).permuted(random.Random(1)))
    text = ordered_ptx(ptx, {"of": ptx_digest(ptx), "runs": {...}})  # a stored order

The variant keeps the compiled kernel's signature, threads and shared bytes: it must be
the same kernel up to the order of its instructions (a different PTX text of the same
entry). A text ptxas rejects raises the loader's `ModuleLoadError`.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from tilevm.backend import cache
from tilevm.backend.cuda.kernel import Kernel
from tilevm.backend.cuda.module import load_artifact
from tilevm.backend.launch import build_artifact, cache_key, compiled_kernel, current_arch
from tilevm.ir.stmt import Program
from tilevm.tune.ptx_order import PtxOrder, PtxOrderError, ptx_digest

__all__ = ["compiled_ptx", "ptx_variant", "machine_code_variant", "ordered_ptx",
           "ordered_kernel"]


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


def ordered_ptx(ptx: str, order: dict[str, Any]) -> str | None:
    """`ptx` in a stored `order` (`{"of": ptx_digest of the text it was found on, "runs":
    PtxOrder.moved(...)}`, as a tuning table holds it), or None with a warning where it
    does not apply: found on another compiled text (another compiler version, say), or
    not a legal order of this one. The caller then runs the compiled order: an order
    from a table is checked, never trusted."""
    if order.get("of") != ptx_digest(ptx):
        warnings.warn("the tuning table's PTX order was found on another "
                      "compiled text (another tilevm version?); running the compiled order",
                      stacklevel=3)
        return None
    try:
        return PtxOrder.parse(ptx).reordered(order.get("runs", {}))
    except (PtxOrderError, TypeError, ValueError) as err:
        warnings.warn(f"the tuning table's PTX order is not legal here "
                      f"({err}); running the compiled order", stacklevel=3)
        return None


def ordered_kernel(program: Program, order: dict[str, Any] | None) -> Kernel:
    """`program`'s kernel in a stored PTX `order` where it applies (`ordered_ptx`),
    else (None, or an order that does not apply) the compiled one."""
    text = ordered_ptx(compiled_ptx(program), order) if order else None
    return ptx_variant(program, text) if text else compiled_kernel(program)
