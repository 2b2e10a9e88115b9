"""Helpers the compiler tests share (tests/ is on sys.path): loading kernel files, and
running one kernel both on the GPU and in the interpreter on the same inputs."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

# The spill tests' slack: ptxas (13.0) sometimes keeps a kernel at an occupancy step (96,
# 128 registers) by spilling a few bytes rather than using a few more registers (the
# 2-bit decode kernel on sm_80, one example tiling on sm_90); a register blowup spills
# hundreds. So "compiles without spills" allows this much.
SPILL_SLACK = 32  # bytes


def load_module(path: Path) -> ModuleType:
    """Import a Python file (kernels must live in files: the frontend reads their source)."""
    spec = importlib.util.spec_from_file_location(f"_k_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_both(kernel: Any, args: list, constants: dict | None = None) -> tuple[list, list]:
    """Run `kernel` compiled on the GPU and in the interpreter, each on its own copy of
    `args` (numpy arrays and scalars); return (gpu outputs, interpreter outputs)."""
    from tilevm.backend.launch import launch_program

    constants = constants or {}
    expected = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    kernel.interpret(*expected, **constants)
    got = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    launch_program(kernel.specialize(**constants), got)
    return got, expected
