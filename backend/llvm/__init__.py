"""All LLVM emission: the codegen driver (`codegen`), the context the lowerings use
(`context`), one lowering module per instruction family (`lowering/`), scalar
arithmetic and value conversions (`arith`, `conversion`, `bits`, `types`), the shared
buffer and tensor-core operands the families share (`shared_buffer`, `mma_operands`),
and PTX through LLVM's NVPTX target (`nvptx`). It takes no decision of its own: it
emits what the passes recorded, from the facts of backend/analysis."""
