# srcprof.sh: ncu's per-instruction warp-state samples (SourceCounters) of the tuned
# shared-weights kernel, int8 and f6e3m2 on 8B qkv at M = 4096, into $OUT
NCU=/usr/local/cuda/bin/ncu
export TILEVM_CACHE_DIR=/tmp/tvc
D=bench/results/qmm_h100_prefill_source_profile
python3 $D/srcprof.py int8,f6e3m2  # (compiles the kernels into the cache first)
$NCU --clock-control none --profile-from-start off --section SourceCounters \
    --section WarpStateStats --section SpeedOfLight --section LaunchStats \
    -o /tmp/src python3 $D/srcprof.py int8,f6e3m2 > $OUT/ncu_log.txt 2>&1
$NCU --import /tmp/src.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
$NCU --import /tmp/src.ncu-rep --page source --csv --print-source sass > $OUT/source.csv 2>&1
python3 $D/stalls.py $OUT/source.csv > $OUT/stalls.txt  # (source.csv committed gzipped)
