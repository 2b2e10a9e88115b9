# prof.sh: ncu of prof.py (the tuned int3, int2, int4 decode kernels at M = 1 and 16 on
# 70B gate_up), into $OUT/ncu.txt; the schedules into $OUT/schedules.txt
NCU=/usr/local/cuda/bin/ncu
export TILEVM_CACHE_DIR=/tmp/tvc
python3 bench/results/qmm_h100_decode_m16_deepen/prof.py > $OUT/schedules.txt 2>&1
M="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,launch__block_size,smsp__inst_executed.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_fp16.sum,smsp__inst_executed_pipe_lsu.sum"
$NCU --clock-control none --profile-from-start off --metrics $M,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio python3 bench/results/qmm_h100_decode_m16_deepen/prof.py 2>&1 | grep -v "^==PROF==" | awk '/^  [a-zA-Z_0-9].*(Context|\()/ {print "KERNEL", $1} /(duration|per_second|issue_active|registers|cycles_active|inst_executed|bytes|grid_size|block_size|throughput|warps_active)/ {print "   ", $1, $(NF-1), $NF} /stalled/ && $NF+0 > 0.05 {print "   ", $1, $NF}' > $OUT/ncu.txt
