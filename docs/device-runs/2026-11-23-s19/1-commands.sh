set -u
export NCCL_NVLS_ENABLE=0
run_one() { timeout -s KILL 150 env CCL_GRAPH_DIRECT=$1 CCL_GRAPH_ONE_GPU=1 CCL_GRAPH_TIME=1 CCL_GRAPH_AHEAD=64 CCL_GRAPH_HANG_S=60 LD_PRELOAD=$PWD/.dev/libnccl.so.2 NCCL_DEBUG=INFO python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/torch_graph.py d$1 > $OUT/tg$1.log 2>&1; echo "== torch_graph one GPU CCL_GRAPH_DIRECT=$1 exit $?"; grep -E "PASS|wrong|rror|us/op|ahead|direct paths|Timeout|Traceback" $OUT/tg$1.log | head -20; }
run_one 1
run_one 0
for d in 1 0; do echo "#### perf CCL_GRAPH_DIRECT=$d"; CCL_GRAPH_DIRECT=$d MAX=16M ONE_GPU=1 NGPU=1 G=10 bash tests/gpu/device_graph_perf.sh; done
