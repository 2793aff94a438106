# Call 10: the final build: probe compiles, GPU unit tests, two_comms one GPU, the nine ops
# (-g 2, one GPU), PyTorch captured and eager on one GPU (two processes, preload in each).
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.dev
nvcc -cubin -arch=sm_90 -o /tmp/probe_k.cubin tests/gpu/module_load_probe_k.cu && nvcc -O2 -arch=sm_90 -o /tmp/load_probe tests/gpu/module_load_probe.cu -lcuda -lpthread && echo "probe builds"
timeout 180 .dev/gpu_backend_test --test-threads=1 2>&1 | grep -E "test result|FAIL|panick"
PROBE=0 RUNS=10 LIMIT_S=15 TAG=on_ bash tests/gpu/device_two_comms_hang.sh | tail -1; rm -f $OUT/on_run_*
P="timeout -s KILL 100 mpirun --allow-run-as-root --bind-to none -np 1 -x LD_LIBRARY_PATH .dev/ccl-perf"
for op in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter; do $P $op -b 8 -e 4M -f 16 -n 3 -w 1 -c 1 -g 2 -d float,bfloat16 > $OUT/10-g2-$op.log 2>&1; echo "$op g2 exit $?: $(grep -E 'Out of bounds' $OUT/10-g2-$op.log)"; done
timeout -s KILL 150 env CCL_GRAPH_ONE_GPU=1 CCL_GRAPH_AHEAD=64 CCL_GRAPH_HANG_S=60 LD_PRELOAD=$PWD/.dev/libnccl.so.2 NCCL_DEBUG=INFO python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/torch_graph.py s20 > $OUT/10-torch-graph.log 2>&1; echo "torch_graph one GPU exit $?"; grep -E "PASS|wrong|rror|Traceback|loaded ahead" $OUT/10-torch-graph.log | cut -c1-220 | head -12
cd $OUT && tar czf 10-logs.tgz 10-*.log && rm -f 10-*.log
