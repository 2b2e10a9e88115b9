"""source_stalls.py SUFFIX TITLE: per SASS opcode and per stall reason, the share of the warp
stall samples in prof.sh's src$SUFFIX_int4.csv and src$SUFFIX_f6e3m2.csv (in the current
folder), and the 14 instructions with the most (ncu_source_stalls*.txt)."""

import collections
import csv
import sys

print(sys.argv[2])
print("warp stall samples per SASS opcode and per reason (% of all samples), and the 14 "
      "instructions with the most samples")
for d in ("int4", "f6e3m2"):
    rows = list(csv.reader(open(f"src{sys.argv[1]}_{d}.csv")))
    hdr, data = rows[1], rows[2:]
    isrc, iss = hdr.index("Source"), hdr.index("Warp Stall Sampling (All Samples)")
    stallcols = [i for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
    tot = sum(float(r[iss] or 0) for r in data)
    byop, byreason = collections.Counter(), collections.Counter()
    for r in data:
        parts = r[isrc].split()
        op = (parts[1] if parts and parts[0].startswith("@") else parts[0]) if parts else "?"
        byop[op.split(".")[0]] += float(r[iss] or 0)
        for i in stallcols:
            byreason[hdr[i]] += float(r[i] or 0)
    print(f"\n{d}: {int(tot)} samples")
    print(" by opcode:", ", ".join(f"{k} {v / tot * 100:.1f}" for k, v in byop.most_common(14)))
    print(" by reason:", ", ".join(f"{k} {v / tot * 100:.1f}"
                                   for k, v in byreason.most_common(10)))
    for r in sorted(data, key=lambda r: -float(r[iss] or 0))[:14]:
        top = sorted(((float(r[i] or 0), hdr[i]) for i in stallcols), reverse=True)[:3]
        print(f"   {r[isrc][:58]:58s} {float(r[iss]) / tot * 100:4.1f}  "
              + ", ".join(f"{h} {v / tot * 100:.1f}" for v, h in top))
