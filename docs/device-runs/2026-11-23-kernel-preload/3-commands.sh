export NCCL_NVLS_ENABLE=0
nvcc -cubin -arch=sm_90 -o /tmp/probe_k.cubin tests/gpu/module_load_probe_k.cu && nvcc -O2 -arch=sm_90 -o /tmp/load_probe tests/gpu/module_load_probe.cu -lcuda -lpthread 2>&1 | grep -v warning | head -20
timeout 150 /tmp/load_probe /tmp/probe_k.cubin > $OUT/3-probe-actions.txt 2>&1; echo "probe exit $?"
cat $OUT/3-probe-actions.txt | cut -c1-140
M="mpirun --allow-run-as-root --bind-to none -x LD_LIBRARY_PATH -x NCCL_DEBUG -x CCL_KERNEL_CACHE"
export LD_LIBRARY_PATH=$PWD/.dev NCCL_DEBUG=INFO
for c in "/tmp/kc_cold cold-shared" "/tmp/kc_cold warm" "off no-cache"; do set -- $c; export CCL_KERNEL_CACHE=$1; s=$(date +%s%N)
 timeout 120 $M -np 4 .dev/ccl-perf all_reduce -b 8 -e 8 -n 5 -w 1 > $OUT/3-init-$2.log 2>&1; echo "== 4 processes, $2: exit $? in $((($(date +%s%N)-s)/1000000)) ms"; grep -ho "kernels loaded ahead.*" $OUT/3-init-$2.log; done
unset NCCL_DEBUG CCL_KERNEL_CACHE
for op in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter; do timeout 40 .dev/ccl-perf $op -b 8 -e 4M -f 16 -n 3 -w 1 -c 1 -g 2 2>&1 | grep -E "wrong|Avg|rror" | tr '\n' ' '; echo " <- $op g2"; done
for g in 3 4; do timeout 60 .dev/ccl-perf all_reduce -b 8 -e 16M -f 16 -n 3 -w 1 -c 1 -g $g -d float,bfloat16,int32 -o sum,max 2>&1 | grep -E "wrong|Avg|rror" | tr '\n' ' '; echo " <- all_reduce g$g"; done
timeout 60 .dev/ccl-perf all_reduce -b 8 -e 1M -f 32 -n 3 -w 1 -c 1 -g 2 -G 2 2>&1 | grep -E "wrong|Avg|rror" | tr '\n' ' '; echo " <- all_reduce g2 -G"
