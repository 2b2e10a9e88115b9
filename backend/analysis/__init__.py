"""Facts about a Program, computed once per program object and carried (`memo`), never
recomputed by their consumers: the shared-memory plan (`shared_memory`), TMA copies,
tensor maps and the producer warp's barriers (`tma`), the kernel signature
(`signature`), the tensor-core fragment layouts (`fragments`), `ldmatrix` shapes
(`ldmatrix`), vector widths (`vectors`), divisibility (`divisibility`), which tiles are
packed (`packing`), where wgmma groups are waited for (`wgmma_waits`), and the GPU
targets they are for (`target`).

The bottom layer of the backend: it imports ir, layouts and dtypes only (no llvmlite, no
CUDA, no passes), so the passes, the LLVM emission and the cost model all read it. This
package's own import is empty: import the module of the fact you need.
"""
