#!/bin/bash
NCU=/usr/local/cuda/bin/ncu
python3 -m pip install -q --no-build-isolation --no-deps -e . >/dev/null 2>&1
export TILEVM_CACHE_DIR=/tmp/tvcp
M="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,smsp__inst_executed.sum"
python3 bench/results/qmm_h100_prefill_shared_weights/sharedprof.py int4,int8,f6e3m2 >/dev/null 2>&1
$NCU --clock-control none --profile-from-start off --metrics $M,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio python3 bench/results/qmm_h100_prefill_shared_weights/sharedprof.py int4,int8,f6e3m2 2>&1 | grep -v "^==PROF==" | awk '/^  [a-zA-Z_0-9]+.*Context/ {print "KERNEL", $1} /(duration|per_second|issue_active|warps_active|registers|cycles_active|bank_conflicts|wavefronts|inst_executed)/ {print "   ", $1, $NF} /stalled/ && $NF+0 > 0.15 {print "   ", $1, $NF}' > $OUT/ncu_shared.txt
cat $OUT/ncu_shared.txt | head -90
