#!/bin/bash
# usage: dprof2.sh DTYPE N K M -> tuned schedule, ncu summary + top stall SASS lines
NCU=/usr/local/cuda/bin/ncu
S=$(python3 .scratch/dprof2.py $1 $2 $3 $4 tune 2>/dev/null | tail -1)
echo "== $1 N=$2 K=$3 M=$4 $S"
$NCU --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg,gpc__cycles_elapsed.max,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum -k regex:qmm -c 1 --launch-skip 2 python3 .scratch/dprof2.py $1 $2 $3 $4 "$S" 2>&1 | grep -v "^==PROF==" | grep -E "Duration|DRAM Throughput|Registers|Waves|Grid Size|Block Size|Achieved|Theoretical Occ|Warp Cycles Per Issued|stalled|cycles_active|cycles_elapsed|issue_active|inst_executed|Memory Throughput" | awk '$NF+0 > 0.05 || !/stalled/' | head -40
$NCU --clock-control none --section SourceCounters --section WarpStateStats -k regex:qmm -c 1 --launch-skip 2 --page source --print-source sass --csv python3 .scratch/dprof2.py $1 $2 $3 $4 "$S" > /tmp/src.csv 2>/dev/null
python3 - <<'PY'
import csv
rows = list(csv.reader(open("/tmp/src.csv")))
hdr_i = next(i for i, r in enumerate(rows) if "Source" in r)
hdr = rows[hdr_i]; data = rows[hdr_i + 1:]
si = hdr.index("Source")
cand = [c for c in hdr if "Sampling" in c and "All" in c] or [c for c in hdr if "Sampl" in c]
ci = hdr.index(cand[0])
tot = sum(float(r[ci] or 0) for r in data if len(r) > ci)
print("sample column:", cand[0], "total", tot, "instrs", len(data))
top = sorted(((float(r[ci] or 0), i, r[si]) for i, r in enumerate(data) if len(r) > ci), reverse=True)[:22]
for v, i, src in top:
    print(f"{100*v/tot:5.1f}% #{i:4d} {src}")
PY
