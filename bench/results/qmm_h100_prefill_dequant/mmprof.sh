NCU=/usr/local/cuda/bin/ncu
python3 -m pip install -q --no-build-isolation --no-deps -e . >/dev/null 2>&1
export TILEVM_CACHE_DIR=/tmp/tvcp
python3 bench/results/qmm_h100_prefill_dequant/mmprof.py >/dev/null 2>&1
M="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,launch__block_size,launch__shared_mem_per_block_dynamic,launch__shared_mem_per_block_static,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum,launch__cluster_dim_x,launch__cluster_dim_y"
$NCU --clock-control none --profile-from-start off --metrics $M,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio python3 bench/results/qmm_h100_prefill_dequant/mmprof.py 2>&1 | grep -v "^==PROF==" | awk '/^  [a-zA-Z_0-9].*(Context|\()/ {print "KERNEL", $1} /(duration|per_second|issue_active|registers|cycles_active|inst_executed|hit_rate|bytes_|grid_size|block_size|shared_mem|cluster)/ {print "   ", $1, $NF} /stalled/ && $NF+0 > 0.05 {print "   ", $1, $NF}' > $OUT/ncu_matmul.txt
