export NCCL_NVLS_ENABLE=0
timeout -s KILL 150 env CCL_GRAPH_ONE_GPU=1 CCL_GRAPH_TIME=1 CCL_GRAPH_AHEAD=64 CCL_GRAPH_HANG_S=60 LD_PRELOAD=$PWD/.dev/libnccl.so.2 NCCL_DEBUG=WARN python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/torch_graph.py fz > $OUT/tg_fz.log 2>&1; echo "== torch_graph 2 procs exit $?"; grep -E "PASS|wrong|rror|us/op|ahead|Timeout|Traceback" $OUT/tg_fz.log | head
OPS="all_reduce all_gather reduce_scatter sendrecv broadcast alltoall gather scatter reduce" MAX=16M STEP=8 bash tests/gpu/device_graph_direct.sh > $OUT/all.txt 2>&1
grep -E "^==|exit|^ +[0-9]" $OUT/all.txt | awk '/^==/{h=$0} /^ +[0-9]/{w+=$9; if ($13 ~ /^[0-9]+$/) w+=$13; rows++} /exit/{print h, $0, "rows", rows+0, "wrong", w+0; rows=0; w=0}'
grep -A4 "all_reduce ccl_graph_direct" $OUT/all.txt
PER=4 OPS="all_reduce reduce_scatter alltoall all_gather broadcast reduce sendrecv gather scatter" MAX=1M STEP=32 bash tests/gpu/device_graph_direct.sh > $OUT/per4.txt 2>&1
grep -E "^==|exit|^ +[0-9]" $OUT/per4.txt | awk '/^==/{h=$0} /^ +[0-9]/{w+=$9; if ($13 ~ /^[0-9]+$/) w+=$13; rows++} /exit/{print h, $0, "rows", rows+0, "wrong", w+0; rows=0; w=0}' | grep direct
cd $OUT && tar czf final.tgz all.txt per4.txt tg_fz.log graph_direct && rm -rf graph_direct
