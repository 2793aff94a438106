export NCCL_NVLS_ENABLE=0
CCL=$PWD/.dev
timeout -s KILL 150 env CCL_GRAPH_ONE_GPU=1 CCL_GRAPH_TIME=1 CCL_GRAPH_AHEAD=64 CCL_GRAPH_HANG_S=60 LD_PRELOAD=$CCL/libnccl.so.2 NCCL_DEBUG=WARN python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/torch_graph.py final > $OUT/tg_final.log 2>&1; echo "== torch_graph 2 procs exit $?"; grep -E "PASS|wrong|rror|us/op|ahead|Timeout|Traceback" $OUT/tg_final.log | head
timeout -s KILL 150 env CCL_GRAPH_TIME=1 CCL_GRAPH_AHEAD=64 CCL_GRAPH_HANG_S=60 LD_PRELOAD=$CCL/libnccl.so.2 NCCL_DEBUG=WARN python3 -m torch.distributed.run --nproc-per-node 1 tests/gpu/torch_graph.py final1 > $OUT/tg_final1.log 2>&1; echo "== torch_graph 1 rank exit $?"; grep -E "PASS|wrong|rror|us/op|ahead|Timeout|Traceback" $OUT/tg_final1.log | head
OPS="all_reduce all_gather sendrecv alltoall reduce_scatter broadcast" MAX=16M STEP=16 bash tests/gpu/device_graph_direct.sh > $OUT/final.txt 2>&1
grep -E "^==|exit|^ +[0-9]" $OUT/final.txt | awk '/^==/{h=$0} /^ +[0-9]/{w+=$9; if ($13 ~ /^[0-9]+$/) w+=$13; rows++} /exit/{print h, $0, "rows", rows+0, "wrong", w+0; rows=0; w=0}'
grep -A6 "graph_direct" $OUT/final.txt | grep -E "^==|^ +(8|16777216) "
gcc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/two_comms.c -L "$CCL" -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -lpthread -o /tmp/two_comms 2>&1 | head -5
TWO_COMMS_ONE_GPU=1 TWO_COMMS_TIMEOUT_S=20 NCCL_DEBUG=WARN timeout -s KILL 25 stdbuf -oL /tmp/two_comms 20 > $OUT/tc.log 2>&1; echo "two_comms exit $?"; grep -E "PASS|FAIL" $OUT/tc.log
cd $OUT && tar czf final.tgz final.txt tg_final.log tg_final1.log tc.log graph_direct && rm -rf graph_direct
