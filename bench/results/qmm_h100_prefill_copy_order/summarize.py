"""summarize.py FILE.jsonl [BASE]: per layer and type, each variant's best time over BASE's
(default "ss", in-flight 1), its spread (max/min), and the geomean per type."""

import collections
import json
import math
import sys

# ruff: noqa: E402, E401, E702, E731, B023
rows = [json.loads(l) for l in open(sys.argv[1])]
t = collections.defaultdict(list)
for r in rows:
    for v, us in r["us"].items():
        t[(r["shape"], r["dtype"], r["inflight"], v)].append(us)
    assert len(set(r["sums"].values())) == 1, r
keys = sorted({(k[0], k[1]) for k in t})
vs = sorted({k[3] for k in t})
for dt in ["int4", "int3", "f6e3m2", "int8"]:
    g = collections.defaultdict(list)
    for sh, d in keys:
        if d != dt:
            continue
        base = min(t[(sh, d, 1, sys.argv[2] if len(sys.argv) > 2 else "ss")])
        line = [sh, d, base]
        for inf in (1, 2):
            for v in vs:
                if (sh, d, inf, v) in t:
                    r = min(t[(sh, d, inf, v)]) / base
                    g[(inf, v)].append(r)
                    line.append(
                        f"{inf}{v}:{r:.3f}({max(t[(sh, d, inf, v)]) / min(t[(sh, d, inf, v)]):.2f})"
                    )
        print(*line)
    print(dt, {k: round(math.exp(sum(map(math.log, v)) / len(v)), 3) for k, v in g.items()})
