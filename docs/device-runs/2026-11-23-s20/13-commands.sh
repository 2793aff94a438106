# Call 13: Megatron-LM's CUDA_DEVICE_MAX_CONNECTIONS=1 (every stream of a process on one
# hardware queue), two processes on the one GPU (a queue each), every op, checked.
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.dev CUDA_DEVICE_MAX_CONNECTIONS=1
M="mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x CUDA_DEVICE_MAX_CONNECTIONS"
for op in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter; do
  timeout -s KILL 90 $M .dev/ccl-perf $op -b 8 -e 64M -f 8 -n 5 -w 1 -c 1 -d float,bfloat16 > $OUT/13-$op.log 2>&1
  echo "$op MAX_CONNECTIONS=1 exit $?: $(grep -cE '^ +[0-9]' $OUT/13-$op.log) rows, wrong $(grep -E '^ +[0-9]' $OUT/13-$op.log | awk '{w += $9; if ($13 ~ /^[0-9]+$/) w += $13} END {print w + 0}')"
done
timeout -s KILL 90 $M .dev/ccl-perf all_reduce -b 8 -e 64M -f 8 -n 5 -w 1 -c 1 -G 2 > $OUT/13-graph.log 2>&1
echo "all_reduce -G 2 MAX_CONNECTIONS=1 exit $?: $(grep -cE '^ +[0-9]' $OUT/13-graph.log) rows, wrong $(grep -E '^ +[0-9]' $OUT/13-graph.log | awk '{w += $9; if ($13 ~ /^[0-9]+$/) w += $13} END {print w + 0}')"
cd $OUT && tar czf 13-logs.tgz 13-*.log && rm -f 13-*.log
# Call 14: the same setting with both ranks in ONE process (-g 2): they share that one queue.
for c in 1 8; do for op in all_reduce sendrecv all_gather; do CUDA_DEVICE_MAX_CONNECTIONS=$c timeout -s KILL 30 mpirun --allow-run-as-root --bind-to none -np 1 -x LD_LIBRARY_PATH -x CUDA_DEVICE_MAX_CONNECTIONS .dev/ccl-perf $op -b 8 -e 64M -f 8 -n 5 -w 1 -c 1 -g 2; done; done
