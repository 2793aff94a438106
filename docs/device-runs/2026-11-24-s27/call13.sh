# Call 13: captured all-reduces, broadcasts and reduces larger than a slot region (32 MiB) go
# host-only in rounds of pieces; against the staged captured path; P2P off, 2 and 3 ranks.
set -u; O=$OUT
export LD_LIBRARY_PATH=$PWD/.dev NCCL_P2P_DISABLE=1 NCCL_NVLS_ENABLE=0
X="-x NCCL_P2P_DISABLE -x LD_LIBRARY_PATH -x CCL_GRAPH_DIRECT -x NCCL_DEBUG"
rows() { grep -E '^ +[0-9]' "$1" | awk -v t="$2" '{ w += $9; if ($13 != "N/A") w += $13; n++; last = $1 ":" $6 "us/" $8 } END { printf "%s: %d rows, wrong %d, last %s\n", t, n, w, last }'; }
{
for np in 2 3; do
  for op in all_reduce broadcast reduce; do
    for gd in 1 0; do
      CCL_GRAPH_DIRECT=$gd NCCL_DEBUG=INFO timeout -s KILL 150 mpirun --allow-run-as-root --bind-to none -np $np $X \
        .dev/ccl-perf $op -b 16M -e 128M -f 4 -n 5 -w 1 -G 2 -c 1 -r all -d float,bfloat16 > /tmp/g.log 2>&1; rc=$?
      rows /tmp/g.log "graph $op np $np direct=$gd 16-128 MiB (exit $rc, $(sed 's/\x1b\[[0-9;]*m//g' /tmp/g.log | grep -c 'host-only (copy engines') notes)"
    done
  done
done
} 2>&1 | tee $O/13-captured-host-only-rounds.txt
