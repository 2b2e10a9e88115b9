#!/bin/bash
NCU=/usr/local/cuda/bin/ncu
python3 -m pip install -q --no-build-isolation --no-deps -e . >/dev/null 2>&1
export TILEVM_CACHE_DIR=/tmp/tvcp
M="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum"
python3 .scratch/s17/prof2.py int4,f6e3m2 >/dev/null 2>&1
$NCU --clock-control none --profile-from-start off --metrics $M,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio python3 .scratch/s17/prof2.py int4,int3,f6e3m2,int8 2>&1 | grep -v "^==PROF==" | awk '/^  [a-zA-Z_0-9]+.*Context/ {print "KERNEL", $1} /(duration|per_second|issue_active|registers|cycles_active|bank_conflicts|inst_executed|hit_rate|bytes_read)/ {print "   ", $1, $NF} /stalled/ && $NF+0 > 0.1 {print "   ", $1, $NF}' > $OUT/ncu_metrics_pf4.txt
for d in int4 f6e3m2; do
  $NCU --clock-control none --profile-from-start off --section WarpStateStats --section SourceCounters -o /tmp/rep2_$d -f python3 .scratch/s17/prof2.py $d > /dev/null 2>&1
  $NCU -i /tmp/rep2_$d.ncu-rep --page source --csv --print-source sass > $OUT/src_pf4_$d.csv 2> $OUT/src_pf4_$d.err
done

