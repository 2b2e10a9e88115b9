"""The compiler backend: lowering passes, LLVM IR codegen with llvmlite, PTX, ptxas and
the cuda-python runtime. (Built by the backend issue; nothing lives here yet.)"""
