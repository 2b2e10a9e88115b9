"""The compiler's IR -> IR passes, one per module, each `run(program, context)` with a
`PassContext` (context.py); `tilevm.backend.pipeline` lists them in order. They read the
facts of backend/analysis and never import LLVM or the CUDA driver."""
