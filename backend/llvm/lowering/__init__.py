"""The lowering of each instruction, one module per family of instructions.

`lower_<opname>(cg, inst)` emits the per-thread LLVM IR of one instruction through the
`KernelContext` `cg` (backend/llvm/context.py). A family takes no decision of its own:
it emits what the passes recorded in the instruction's `lowering`, from the facts of
backend/analysis. Every module of this package is a family; `LOWERINGS` maps each
lowered opname to its function, found by that naming rule, and codegen dispatches on it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

FAMILIES = tuple(importlib.import_module(f"{__name__}.{info.name}")
                 for info in pkgutil.iter_modules(__path__))

LOWERINGS: dict[str, Callable[[Any, Any], None]] = {}
for _module in FAMILIES:
    for _name in dir(_module):
        if _name.startswith("lower_"):
            opname = _name[len("lower_"):]
            if opname in LOWERINGS:
                raise ImportError(f"two lowerings of {opname}: {LOWERINGS[opname].__module__} "
                                  f"and {_module.__name__}")
            LOWERINGS[opname] = getattr(_module, _name)
