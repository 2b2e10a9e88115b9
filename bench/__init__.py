"""Benchmark programs, run on a GPU machine; each writes its results to a folder given on
the command line.

- `python -m tilevm.bench.qmm OUT` (or `vmc bench qmm OUT`): the quantized matmul against
  cuBLAS, gemlite and Humming, graph and isolated methods; qmm.json, qmm.md, qmm.png.
  Its pieces: `protocol` (what it measures, the options), `timing` (the timers),
  `roofline`, `weights`, `measure`, `tilevm_adapter`, `baselines`, `output`.
- `python -m tilevm.bench.calls OUT`: what a call costs (graph, eager, host submit time,
  dependent launches); calls.json, calls.md.
- `python -m tilevm.bench.mlp_sync OUT`: tile synchronization (issue 47): a copy -> copy
  pair and the quantized MLP, synchronized against serialized; mlp_sync.json, .md.
- `python -m tilevm.bench.compile_time OUT`: cold compile time by stage;
  compile_time.json and a table.
- `read_floor`: the read-only kernel whose time bounds what a memory-bound matmul can
  reach (`qmm --read-floor`).
"""
