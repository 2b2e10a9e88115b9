"""Loading the example kernels by path: bench sits beside examples/ in the import order
(tests/test_layering.py), so it reads their files rather than importing the package."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example(name: str) -> ModuleType:
    """A fresh module object of examples/NAME.py: its kernels carry no cached
    specialization (what a cold compile measures)."""
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
