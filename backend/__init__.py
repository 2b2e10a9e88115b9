"""The compiler backend: facts about a program (analysis/, the GPU targets among them),
passes (passes/, listed in `pipeline`), LLVM IR and PTX through LLVM's NVPTX target
(llvm/), ptxas (`ptxas`), the on-disk cache (`cache`), and the cuda-python runtime
(`cuda/`, reached through `launch`). docs/compiler.md describes the design and what is lowered.

Importing it needs llvmlite; only running kernels needs a GPU and its driver.
"""

from tilevm.backend.analysis.target import TARGETS, TargetError
from tilevm.backend.cache import COMPILER_VERSION, Artifact, CacheKey, KernelCache, get_or_build
from tilevm.backend.pipeline import PASS_NAMES, CompiledKernel, compile_program, run_passes
from tilevm.backend.ptxas import PtxasNotFoundError, PTXError, ResourceReport, check_ptx

__all__ = [
    "COMPILER_VERSION", "Artifact", "CacheKey", "KernelCache", "get_or_build", "PASS_NAMES",
    "CompiledKernel", "compile_program", "run_passes", "PTXError", "PtxasNotFoundError",
    "ResourceReport", "check_ptx", "TARGETS", "TargetError",
]
