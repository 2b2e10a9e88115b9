"""The compiler backend: passes (backend/passes/, listed in `pipeline`), LLVM IR codegen
with llvmlite (`codegen`, `conversions`), PTX through LLVM's NVPTX target (`target`),
ptxas (`ptxas`), the on-disk cache (`cache`), and the cuda-python runtime (`runtime`,
`device_array`, `launch`). docs/compiler.md describes the design and what is lowered.

Importing it needs llvmlite; only running kernels needs a GPU and its driver.
"""

from tilevm.backend.cache import COMPILER_VERSION, Artifact, CacheKey, KernelCache, get_or_build
from tilevm.backend.pipeline import PASS_NAMES, CompiledKernel, compile_program, run_passes
from tilevm.backend.ptxas import PtxasNotFoundError, PTXError, ResourceReport, check_ptx
from tilevm.backend.target import TARGETS, TargetError

__all__ = [
    "COMPILER_VERSION", "Artifact", "CacheKey", "KernelCache", "get_or_build", "PASS_NAMES",
    "CompiledKernel", "compile_program", "run_passes", "PTXError", "PtxasNotFoundError",
    "ResourceReport", "check_ptx", "TARGETS", "TargetError",
]
