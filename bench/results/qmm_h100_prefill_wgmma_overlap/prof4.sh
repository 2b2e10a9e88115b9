#!/bin/bash
# ncu: tensor-pipe and stall metrics of the wgmma kernel (int3, int4) and cuBLAS at 8B qkv M=4096
NCU=/usr/local/cuda/bin/ncu
python3 -m pip install -q --no-build-isolation --no-deps -e . >/dev/null 2>&1
export TILEVM_CACHE_DIR=/tmp/tvc
$NCU --query-metrics --chip gh100 2>/dev/null | grep -iE "gmma|tensor_op" | head -40 > $OUT/metrics_list.txt
M="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum,launch__registers_per_thread"
for wd in int3 int4; do
  python3 bench/results/qmm_h100_prefill_wgmma_overlap/wgprof.py $wd "128,4,2;128,4,4,2" cublas >/dev/null 2>&1
  $NCU --clock-control none --profile-from-start off --section WarpStateStats --section ComputeWorkloadAnalysis --metrics $M,regex:.*gmma.*,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio python3 bench/results/qmm_h100_prefill_wgmma_overlap/wgprof.py $wd "128,4,2;128,4,4,2" cublas 2>&1 | grep -v "^==PROF==" | awk '!/stalled/ || $NF+0 > 0.1' > $OUT/prof4_$wd.txt
done
ls -la $OUT
