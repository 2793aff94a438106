# the rest of the driver probe, the preload compiled one program per type (cold / warm,
# one process and four), GPU unit tests, correctness of every op on the new build.
export NCCL_NVLS_ENABLE=0
nvcc -cubin -arch=sm_90 -o /tmp/probe_k.cubin tests/gpu/module_load_probe_k.cu && nvcc -O2 -arch=sm_90 -o /tmp/load_probe tests/gpu/module_load_probe.cu -lcuda -lpthread 2>&1 | grep -v warning | head
PROBE_ACTIONS_ONLY=1 timeout 200 /tmp/load_probe /tmp/probe_k.cubin > $OUT/5-probe-actions.txt 2>&1; echo "probe exit $?"
cut -c1-150 $OUT/5-probe-actions.txt
timeout 180 .dev/gpu_backend_test --test-threads=1 2>&1 | grep -E "test result|FAIL|panick"
M="mpirun --allow-run-as-root --bind-to none -x LD_LIBRARY_PATH -x NCCL_DEBUG -x CCL_KERNEL_CACHE"
export LD_LIBRARY_PATH=$PWD/.dev NCCL_DEBUG=INFO
for c in "1 /tmp/kc1 cold" "1 /tmp/kc1 warm" "4 /tmp/kc4 cold-shared" "4 off no-cache"; do set -- $c; export CCL_KERNEL_CACHE=$2; s=$(date +%s%N)
 timeout 120 $M -np $1 .dev/ccl-perf all_reduce -b 8 -e 8 -n 5 -w 1 > $OUT/5-init-$1-$3.log 2>&1; echo "== $1 process(es), $3: exit $? in $((($(date +%s%N)-s)/1000000)) ms"; grep -ho "kernels loaded ahead.*" $OUT/5-init-$1-$3.log; done
unset NCCL_DEBUG CCL_KERNEL_CACHE
for op in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter; do timeout 40 .dev/ccl-perf $op -b 8 -e 4M -f 16 -n 3 -w 1 -c 1 -g 2 > $OUT/5-g2-$op.log 2>&1; echo "$op g2 exit $?: $(grep -E 'Out of bounds' $OUT/5-g2-$op.log)"; done
for g in 3 4; do timeout 90 .dev/ccl-perf all_reduce -b 8 -e 16M -f 16 -n 3 -w 1 -c 1 -g $g -d float,bfloat16,int32,float8e4m3 -o sum,max,avg > $OUT/5-g$g.log 2>&1; echo "all_reduce g$g exit $?: $(grep -E 'Out of bounds' $OUT/5-g$g.log)"; done
timeout 60 .dev/ccl-perf all_reduce -b 8 -e 1M -f 32 -n 3 -w 1 -c 1 -g 2 -G 2 > $OUT/5-G.log 2>&1; echo "all_reduce g2 -G exit $?: $(grep -E 'Out of bounds' $OUT/5-G.log)"
PROBE=0 RUNS=20 LIMIT_S=8 TAG=on_ bash tests/gpu/device_two_comms_hang.sh | tail -1
