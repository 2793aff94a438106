export NCCL_NVLS_ENABLE=0
OPS="sendrecv all_reduce" MAX=64M bash tests/gpu/device_graph_direct.sh 2>&1 | grep -v "^#" | grep -A9 "graph_direct\|ccl_eager"
for per in 3 4; do PER=$per OPS="all_reduce reduce_scatter all_gather" MAX=16M STEP=64 bash tests/gpu/device_graph_direct.sh 2>&1 | grep -v "^#" | grep -A5 "graph_direct\|ccl_eager"; done
timeout -s KILL 150 env CCL_GRAPH_ONE_GPU=1 CCL_GRAPH_TIME=1 CCL_GRAPH_AHEAD=64 CCL_GRAPH_HANG_S=60 LD_PRELOAD=$PWD/.dev/libnccl.so.2 NCCL_DEBUG=INFO python3 -m torch.distributed.run --nproc-per-node 3 tests/gpu/torch_graph.py d3 > $OUT/tg3.log 2>&1; echo "== torch_graph 3 ranks one GPU exit $?"; grep -E "PASS|wrong|rror|us/op|ahead|direct paths|Timeout|Traceback" $OUT/tg3.log | head -20
