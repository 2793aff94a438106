# Call 12: captured sends and receives host-only after every rank handshakes with every other
# (3 ranks: ring send/receive captured; torch_graph.py with 3 processes).
set -u; O=$OUT
export LD_LIBRARY_PATH=$PWD/.dev NCCL_P2P_DISABLE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
X="-x NCCL_P2P_DISABLE -x LD_LIBRARY_PATH -x NCCL_DEBUG"
rows() { grep -E '^ +[0-9]' "$1" | awk -v t="$2" '{ w += $9; if ($13 != "N/A") w += $13; n++; last = $1 ":" $6 "us/" $8 } END { printf "%s: %d rows, wrong %d, last %s\n", t, n, w, last }'; }
{
for np in 2 3 4; do
  NCCL_DEBUG=INFO timeout -s KILL 150 mpirun --allow-run-as-root --bind-to none -np $np $X \
    .dev/ccl-perf sendrecv -b 8 -e 32M -f 32 -n 10 -w 2 -G 3 -c 1 -d float,int8 > /tmp/g.log 2>&1; rc=$?
  rows /tmp/g.log "graph sendrecv np $np (exit $rc, $(sed 's/\x1b\[[0-9;]*m//g' /tmp/g.log | grep -c 'go host-only\|host-only (copy engines') notes)"
done
CCL_GRAPH_ONE_GPU=1 LD_PRELOAD=$PWD/.dev/libnccl.so.2 timeout -s KILL 200 python3 -m torch.distributed.run \
  --nproc-per-node 3 tests/gpu/torch_graph.py host-only > /tmp/tg.log 2>&1
echo "torch_graph np 3: exit $? $(grep -cE 'PASS' /tmp/tg.log) PASS lines"
} 2>&1 | tee $O/12-captured-p2p-all-partners.txt
