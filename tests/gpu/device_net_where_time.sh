# Where the network path's time goes on the GPU machine: raw link throughput (one process,
# one way) per engine count, then per-thread CPU of ccl-perf ranks (host and GPU memory).
CCL=$PWD/.dev
echo "## raw MptLink one way, 4 MiB frames"
timeout 120 .dev/mpt_udp_throughput 8 --engines 1,2,4,8 --frame 4194304 --mib 2048 2>&1 | tail -n 6
for mem in host device; do
 for e in 1 4 8; do
  for op in sendrecv all_reduce; do
   LD_LIBRARY_PATH=$CCL CCL_NET=mpt CCL_MPT_ENGINES=$e NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 CCL_GPU_PIECE_BYTES=4194304 \
    timeout -s KILL 60 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x CCL_NET -x CCL_MPT_ENGINES \
    -x NCCL_SHM_DISABLE -x NCCL_P2P_DISABLE -x CCL_GPU_PIECE_BYTES .dev/ccl-perf $op -b 128M -e 128M -n 60 -w 2 -c 0 --mem $mem > $OUT/tc.$mem.$e.$op.log 2>&1 &
   python3 tests/bench/thread_cpu.py ccl-perf 4 2 > $OUT/tc.$mem.$e.$op.cpu 2>&1
   wait
   echo "$mem e=$e $op: $(grep -E '^ +[0-9]' $OUT/tc.$mem.$e.$op.log | tail -1 | awk '{print $8}') GB/s"; cat $OUT/tc.$mem.$e.$op.cpu
  done
 done
done
