# Call 11: the 48 many-input kernels' slow compilation behind the fill lock (calls 5-6), again,
# and beside: one process of four ranks, four processes twice, and with no cache.
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.dev NCCL_DEBUG=INFO
M="mpirun --allow-run-as-root --bind-to none -x LD_LIBRARY_PATH -x NCCL_DEBUG -x CCL_KERNEL_CACHE -x CUDA_DEVICE_MAX_CONNECTIONS"
run() { export CCL_KERNEL_CACHE=$1; shift; s=$(date +%s%N); timeout 120 $M "$@" > $OUT/11.log 2>&1; echo "== $CCL_KERNEL_CACHE $*: exit $? in $((($(date +%s%N)-s)/1000000)) ms"; grep -o "T[0-9:.]*Z.*kernels loaded ahead.*" $OUT/11.log | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-230; }
run off -np 1 .dev/ccl-perf all_reduce -b 8 -e 8 -n 1 -w 0
run /tmp/k11a -np 1 .dev/ccl-perf all_reduce -b 8 -e 8 -n 5 -w 1 -g 4
run /tmp/k11b -np 4 .dev/ccl-perf all_reduce -b 8 -e 8 -n 5 -w 1
run /tmp/k11c -np 4 .dev/ccl-perf all_reduce -b 8 -e 8 -n 5 -w 1
run off -np 4 .dev/ccl-perf all_reduce -b 8 -e 8 -n 5 -w 1
