# Call 10: sends and receives captured host-only too (each rank its own outbox layout, offsets exchanged at capture),
# with every collective again, against the staged captured path; P2P off, ranks as processes on the one GPU.
set -u; O=$OUT
export LD_LIBRARY_PATH=$PWD/.dev NCCL_P2P_DISABLE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
X="-x NCCL_P2P_DISABLE -x LD_LIBRARY_PATH -x CCL_GRAPH_DIRECT -x NCCL_DEBUG -x CUDA_DEVICE_MAX_CONNECTIONS"
rows() { grep -E '^ +[0-9]' "$1" | awk -v t="$2" '{ w += $9; if ($13 != "N/A") w += $13; n++; last = $1 ":" $6 "us/" $8 } END { printf "%s: %d rows, wrong %d, last %s\n", t, n, w, last }'; }
{
for np in 2 3; do
  for op in reduce gather scatter alltoall all_reduce all_gather reduce_scatter broadcast sendrecv; do
    d="-d float,int8"; case $op in reduce_scatter|all_reduce|reduce) d="-d float,bfloat16,int32 -o sum,max,avg";; esac
    for gd in 1 0; do
      [ $gd = 0 ] && case $op in all_reduce|all_gather|reduce_scatter|broadcast|reduce|gather|scatter|alltoall) continue;; esac
      CCL_GRAPH_DIRECT=$gd NCCL_DEBUG=INFO timeout -s KILL 150 mpirun --allow-run-as-root --bind-to none -np $np $X \
        .dev/ccl-perf $op -b 8 -e 32M -f 32 -n 10 -w 2 -G 3 -c 1 -r all $d > /tmp/g.log 2>&1; rc=$?
      rows /tmp/g.log "graph $op np $np direct=$gd (exit $rc, $(sed 's/\x1b\[[0-9;]*m//g' /tmp/g.log | grep -c 'go host-only (copy engines') notes)"
    done
  done
done
CCL_GRAPH_ONE_GPU=1 LD_PRELOAD=$PWD/.dev/libnccl.so.2 timeout -s KILL 200 python3 -m torch.distributed.run \
  --nproc-per-node 2 tests/gpu/torch_graph.py host-only > /tmp/tg.log 2>&1
echo "torch_graph np 2: exit $? $(grep -cE 'PASS' /tmp/tg.log) PASS lines"
} 2>&1 | tee $O/10-captured-host-only-p2p.txt
