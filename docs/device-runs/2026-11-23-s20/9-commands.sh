# Call 9: ccl-perf sets CUDA_DEVICE_MAX_CONNECTIONS=32 for -g N when unset; libccl warns at 8.
# Four and three ranks on one GPU, every op, several types and reductions, up to 16 MiB.
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.dev
P="timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 1 -x LD_LIBRARY_PATH -x CUDA_DEVICE_MAX_CONNECTIONS -x NCCL_DEBUG .dev/ccl-perf"
s=$(date +%s); $P all_reduce -b 8M -e 8M -n 3 -w 1 -c 1 -g 4 -o avg > $OUT/9-g4-avg.log 2>&1; echo "g4 avg 8M (ccl-perf's 32 queues): exit $? in $(( $(date +%s)-s )) s $(grep 'Out of bounds' $OUT/9-g4-avg.log)"
CUDA_DEVICE_MAX_CONNECTIONS=8 NCCL_DEBUG=WARN $P all_reduce -b 8 -e 8 -n 1 -w 0 -c 1 -g 4 > $OUT/9-warn.log 2>&1; echo "warn at 8 queues: $(grep -c 'share one GPU' $OUT/9-warn.log) line(s)"; grep -m1 -o "ranks .*CUDA" $OUT/9-warn.log
for g in 4 3; do for op in all_reduce reduce_scatter reduce; do s=$(date +%s); $P $op -b 8 -e 16M -f 16 -n 3 -w 1 -c 1 -g $g -d float,bfloat16,int32,float8e4m3 -o sum,max,avg,premulsum -r all > $OUT/9-g$g-$op.log 2>&1; echo "$op g$g exit $? in $(( $(date +%s)-s )) s: $(grep -E '^ +[0-9]' $OUT/9-g$g-$op.log | wc -l) rows, $(grep 'Out of bounds' $OUT/9-g$g-$op.log)"; done
for op in all_gather broadcast alltoall sendrecv gather scatter; do s=$(date +%s); $P $op -b 8 -e 16M -f 16 -n 3 -w 1 -c 1 -g $g -d float,int8,float8e5m2 -r all > $OUT/9-g$g-$op.log 2>&1; echo "$op g$g exit $? in $(( $(date +%s)-s )) s: $(grep -E '^ +[0-9]' $OUT/9-g$g-$op.log | wc -l) rows, $(grep 'Out of bounds' $OUT/9-g$g-$op.log)"; done; done
cd $OUT && tar czf 9-logs.tgz 9-*.log && rm -f 9-*.log
