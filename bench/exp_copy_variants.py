"""Experiment (issue 47): copy -> copy overhead for variants of the tile_post/tile_wait
lowering. Arg: variant name. Edits backend/llvm/lowering/tile_sync.py in place (device copy)."""
import sys, json, pathlib
v = sys.argv[1]
p = pathlib.Path("backend/llvm/lowering/tile_sync.py"); s = p.read_text()
if v in ("B", "D"):
    s = s.replace("red.release.gpu.global.add.s32", "red.relaxed.gpu.global.add.s32")
if v == "C":
    s = s.replace('        _asm(cg, "fence.acq_rel.gpu;", [], [])\n', '')
if v == "D":
    s = s.replace('"ld.acquire.gpu.global.s32 $0, [$1];"', '"ld.relaxed.gpu.global.s32 $0, [$1];"')
    s = s.replace("        b.position_at_end(done)\n", '        b.position_at_end(done)\n        _asm(cg, "fence.acq_rel.gpu;", [], [])\n')
p.write_text(s)
import torch
from tilevm.bench.mlp_sync import measure_copy
for _ in range(3):
    r = measure_copy(torch); r["variant"] = v; print(json.dumps(r), flush=True)
