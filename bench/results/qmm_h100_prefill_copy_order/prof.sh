#!/bin/bash
# prof.sh PREFETCH SUFFIX (on the GPU machine, from the repository root; $OUT the output
# folder): ncu metrics of the four types (ncu_metrics$SUFFIX.txt) and the per-instruction
# stall samples of int4 and f6e3m2 (src$SUFFIX_<type>.csv; source_stalls.py sums them).
# Run with PREFETCH 3 at 75fc0e0 (ncu_8b_qkv.txt) and 4 at ab1c298 (..._prefetch4.txt).
HERE=bench/results/qmm_h100_prefill_copy_order
NCU=/usr/local/cuda/bin/ncu
python3 -m pip install -q --no-build-isolation --no-deps -e . >/dev/null 2>&1
export TILEVM_CACHE_DIR=/tmp/tvcp
M="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum"
python3 $HERE/prof.py $1 int4,f6e3m2 >/dev/null 2>&1  # compile into the cache first
$NCU --clock-control none --profile-from-start off --metrics $M,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio python3 $HERE/prof.py $1 int4,int3,f6e3m2,int8 2>&1 | grep -v "^==PROF==" | awk '/^  [a-zA-Z_0-9]+.*Context/ {print "KERNEL", $1} /(duration|per_second|issue_active|registers|cycles_active|bank_conflicts|inst_executed|hit_rate|bytes_read)/ {print "   ", $1, $NF} /stalled/ && $NF+0 > 0.1 {print "   ", $1, $NF}' > $OUT/ncu_metrics$2.txt
for d in int4 f6e3m2; do
  $NCU --clock-control none --profile-from-start off --section WarpStateStats --section SourceCounters -o /tmp/rep$2_$d -f python3 $HERE/prof.py $1 $d > /dev/null 2>&1
  $NCU -i /tmp/rep$2_$d.ncu-rep --page source --csv --print-source sass > $OUT/src$2_$d.csv
done
