# where the preload's time goes (one program per type, no fsync), one process and four;
# correctness of every op on this build (one GPU, -g N under mpirun -np 1); two_comms one GPU.
export NCCL_NVLS_ENABLE=0
M="mpirun --allow-run-as-root --bind-to none -x LD_LIBRARY_PATH -x NCCL_DEBUG -x CCL_KERNEL_CACHE"
export LD_LIBRARY_PATH=$PWD/.dev NCCL_DEBUG=INFO
timeout 180 .dev/gpu_backend_test --test-threads=1 2>&1 | grep -E "test result|FAIL|panick"
for c in "1 off no-cache" "1 /tmp/k6a cold" "1 /tmp/k6a warm" "4 /tmp/k6b cold-shared" "4 off no-cache" "4 /tmp/k6b warm"; do set -- $c; export CCL_KERNEL_CACHE=$2; s=$(date +%s%N)
 timeout 120 $M -np $1 .dev/ccl-perf all_reduce -b 8 -e 8 -n 5 -w 1 > $OUT/6-init-$1-$3.log 2>&1; echo "== $1 process(es), $3: exit $? in $((($(date +%s%N)-s)/1000000)) ms"; grep -ho "kernels loaded ahead.*" $OUT/6-init-$1-$3.log; done
unset NCCL_DEBUG CCL_KERNEL_CACHE
P="timeout -s KILL 100 mpirun --allow-run-as-root --bind-to none -np 1 -x LD_LIBRARY_PATH .dev/ccl-perf"
for op in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter; do $P $op -b 8 -e 4M -f 16 -n 3 -w 1 -c 1 -g 2 > $OUT/6-g2-$op.log 2>&1; echo "$op g2 exit $?: $(grep -E 'Out of bounds' $OUT/6-g2-$op.log)"; done
for g in 3 4; do $P all_reduce -b 8 -e 16M -f 16 -n 3 -w 1 -c 1 -g $g -d float,bfloat16,int32,float8e4m3 -o sum,max,avg > $OUT/6-g$g.log 2>&1; echo "all_reduce g$g exit $?: $(grep -E 'Out of bounds' $OUT/6-g$g.log)"; done
$P reduce_scatter -b 8 -e 16M -f 16 -n 3 -w 1 -c 1 -g 3 -d half,int64,double -o prod,min,premulsum > $OUT/6-rs-g3.log 2>&1; echo "reduce_scatter g3 exit $?: $(grep -E 'Out of bounds' $OUT/6-rs-g3.log)"
$P all_reduce -b 8 -e 1M -f 32 -n 3 -w 1 -c 1 -g 2 -G 2 > $OUT/6-G.log 2>&1; echo "all_reduce g2 -G exit $?: $(grep -E 'Out of bounds' $OUT/6-G.log)"
PROBE=0 RUNS=20 LIMIT_S=8 TAG=on_ bash tests/gpu/device_two_comms_hang.sh | tail -1
rm -f $OUT/on_run_*
