export NCCL_NVLS_ENABLE=0
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
echo "== NV NCCL 1 rank -G check"; LD_LIBRARY_PATH=$NV timeout 60 .dev/ccl-perf all_reduce -b 8 -e 1M -f 32 -n 5 -w 1 -c 1 -G 3 2>&1 | grep -E "^ +[0-9]|rror"
OPS="all_reduce all_gather reduce_scatter sendrecv broadcast alltoall gather scatter reduce" MAX=16M STEP=8 bash tests/gpu/device_graph_direct.sh > $OUT/all2.txt 2>&1
grep -E "^==|exit|^ +[0-9]" $OUT/all2.txt | awk '/^==/{h=$0} /^ +[0-9]/{w+=$9; if ($13 ~ /^[0-9]+$/) w+=$13; rows++} /exit/{print h, $0, "rows", rows, "wrong", w+0; rows=0; w=0}'
for per in 3 4; do PER=$per OPS="all_reduce reduce_scatter alltoall all_gather broadcast reduce" MAX=4M STEP=16 bash tests/gpu/device_graph_direct.sh > $OUT/per$per.txt 2>&1
grep -E "^==|exit|^ +[0-9]" $OUT/per$per.txt | awk '/^==/{h=$0} /^ +[0-9]/{w+=$9; if ($13 ~ /^[0-9]+$/) w+=$13; rows++} /exit/{print h, $0, "rows", rows, "wrong", w+0; rows=0; w=0}'; done
for d in 1 0; do echo "== all_reduce/reduce_scatter/reduce avg,premulsum,prod,min x 4 types, CCL_GRAPH_DIRECT=$d"
for op in all_reduce reduce_scatter reduce; do CCL_GRAPH_DIRECT=$d LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 150 mpirun --allow-run-as-root --bind-to none -np 1 -x LD_LIBRARY_PATH -x CCL_GRAPH_DIRECT .dev/ccl-perf $op -g 2 -b 8 -e 1M -f 32 -n 5 -w 1 -c 1 -G 3 -o avg,premulsum,prod,min -d float,half,bfloat16,int32 > $OUT/ops_${op}_$d.log 2>&1; echo "$op exit $?"; grep -E "^ +[0-9]" $OUT/ops_${op}_$d.log | awk '{w+=$9; if ($13 ~ /^[0-9]+$/) w+=$13; n++} END {print n" rows, wrong total "w}'; grep -E "rror|wrong elements" $OUT/ops_${op}_$d.log | head -3; done; done
cd $OUT && tar czf graphcheck.tgz all2.txt per3.txt per4.txt ops_*.log graph_direct && rm -rf graph_direct ops_*.log
