# Call 7: all-reduces captured into CUDA graphs under host-only mode (new: through the ranks'
# outboxes in shared host memory, copy engines and one reduction kernel) against the staged
# captured path (CCL_GRAPH_DIRECT=0); P2P off, ranks as processes on the one GPU.
set -u; O=$OUT
export LD_LIBRARY_PATH=$PWD/.dev NCCL_P2P_DISABLE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
X="-x NCCL_P2P_DISABLE -x LD_LIBRARY_PATH -x CCL_GRAPH_DIRECT -x NCCL_DEBUG -x CUDA_DEVICE_MAX_CONNECTIONS"
rows() { grep -E '^ +[0-9]' "$1" | awk -v t="$2" '{ w += $9; if ($13 != "N/A") w += $13; n++; last = $1 ":" $6 "us/" $8 } END { printf "%s: %d rows, wrong %d, last %s\n", t, n, w, last }'; }
{
for np in 2 3; do
  CCL_GRAPH_ONE_GPU=1 LD_PRELOAD=$PWD/.dev/libnccl.so.2 NCCL_DEBUG=INFO timeout -s KILL 200 python3 -m torch.distributed.run \
    --nproc-per-node $np tests/gpu/torch_graph.py host-only > /tmp/tg.$np.log 2>&1
  echo "torch_graph np $np: exit $? $(grep -cE 'PASS' /tmp/tg.$np.log) PASS lines; $(sed 's/\x1b\[[0-9;]*m//g' /tmp/tg.$np.log | grep -c 'go host-only (copy engines') host-only notes"
  grep -E "FAIL|wrong elements|Error|error" /tmp/tg.$np.log | grep -v " 0 wrong" | head -3
done
for np in 2 3; do
  for gd in 1 0; do
    for maxc in 8 1; do
      CCL_GRAPH_DIRECT=$gd CUDA_DEVICE_MAX_CONNECTIONS=$maxc NCCL_DEBUG=INFO timeout -s KILL 150 mpirun --allow-run-as-root --bind-to none -np $np $X \
        .dev/ccl-perf all_reduce -b 8 -e 32M -f 32 -n 10 -w 2 -G 3 -c 1 -d float,bfloat16,int32 -o sum,max,avg > /tmp/g.log 2>&1; rc=$?
      rows /tmp/g.log "graph all_reduce np $np direct=$gd maxconn=$maxc (exit $rc, $(sed 's/\x1b\[[0-9;]*m//g' /tmp/g.log | grep -c 'go host-only (copy engines') notes)"
      [ $maxc = 8 ] && grep -E '^ +[0-9]' /tmp/g.log | awk '$3 == "float" && $4 == "sum" {printf " %s:%sus/%s", $1, $6, $8} END {print ""}'
    done
  done
done
} 2>&1 | tee $O/7-captured-host-only.txt
