"""Benchmark programs, run on a GPU machine; each writes its results to a folder given on
the command line.

- `python -m tilevm.bench.qmm OUT` (or `vmc bench qmm OUT`): the quantized matmul against
  cuBLAS and gemlite; qmm.json, qmm.md, qmm.png. Its pieces: `protocol` (what it
  measures, the options), `timing` (the timer), `roofline`, `weights`, `measure`,
  `tilevm_adapter`, `baselines`, `output`.
- `python -m tilevm.bench.compile_time OUT`: cold compile time by stage;
  compile_time.json and a table.
- `read_floor`: the read-only kernel whose time bounds what a memory-bound matmul can
  reach (`qmm --read-floor`).
"""
