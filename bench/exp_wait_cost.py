"""Experiment (issue 47): what a "tile" wait costs when its chunk is ready. The policy's
waits (one a chunk of 256 rows of down's K: 56 a block on 8B down) cost 25-30% of down
serialized (docs/tile-sync.md). Thread 0's `ld.acquire.gpu` lowers to
`LDG.E.STRONG.GPU` then `CCTL.IVALL`: if most of the cost is that load's round trip,
polling the chunk's semaphore a chunk ahead would hide it; if it is the barrier, it
would not. With bench/exp_wait_cost.patch applied, `TILEVM_EXP_WAIT` picks the wait's
lowering (timing only): `acquire` (as built), `relaxed` (the load without the L1
invalidation) or `none` (the barrier alone: no load; the synchronized runs are then
racy and their bitwise check may fail, the serialized ones are exact). Each variant runs
`python -m tilevm.bench.mlp_sync` on 8B int4 at M = 256 and 512, down unsplit, in its
own kernel cache; one JSON line per serialized or synchronized pair."""
import json
import os
import subprocess
import sys
import tempfile

OUT = sys.argv[1]
for variant in ("acquire", "relaxed", "none"):
    out = os.path.join(OUT, f"wait_{variant}")
    env = dict(os.environ, TILEVM_EXP_WAIT=variant,
               TILEVM_CACHE_DIR=tempfile.mkdtemp(prefix=f"tilevm-{variant}-"))
    done = subprocess.run([sys.executable, "-m", "tilevm.bench.mlp_sync", out, "--layers",
                           "8b", "--wdtypes", "int4", "--m", "256,512", "--splits", "1",
                           "--group-m", "8"], env=env, capture_output=True, text=True)
    if done.returncode:
        print(json.dumps({"variant": variant, "error": done.stderr[-600:]}), flush=True)
        continue
    report = json.load(open(os.path.join(out, "mlp_sync.json")))
    for row in report["rows"]:
        print(json.dumps({"variant": variant, **{k: row.get(k) for k in (
            "M", "policy", "synchronized", "us", "bitwise_equal")}}), flush=True)
