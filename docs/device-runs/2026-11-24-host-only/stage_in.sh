# host-only reductions staged into a GPU mirror of the receive slots on a copy engine
# (CCL_IPC_HOST_ONLY_STAGE_IN=1, new) against kernels reading the host slots (0); P2P off, ranks
# as processes on the one GPU, 128 MiB, GB/s out of place / in place, three alternations; then
# every type x reduction checked with the mirror.
set -u; O=$OUT
export LD_LIBRARY_PATH=$PWD/.dev NCCL_P2P_DISABLE=1
X="-x NCCL_P2P_DISABLE -x LD_LIBRARY_PATH -x CCL_IPC_HOST_ONLY_STAGE_IN -x NCCL_DEBUG"
rows() { grep -E '^ +[0-9]' "$1" | awk -v t="$2" '{ w += $9; if ($13 != "N/A") w += $13; n++; last = $1 ":" $8 "/" $12 } END { printf "%s: %d rows, wrong %d, last %s\n", t, n, w, last }'; }
{
for round in 1 2 3; do
  for np in 2 4; do
    for op in all_reduce reduce_scatter reduce; do
      for si in 1 0; do
        CCL_IPC_HOST_ONLY_STAGE_IN=$si timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np $np $X .dev/ccl-perf $op \
          -b 128M -e 128M -n 10 -w 2 -c 1 --mem device > /tmp/s.log 2>&1
        rows /tmp/s.log "round $round np $np $op stage-in=$si"
      done
    done
  done
done
for np in 2 3; do
  for op in all_reduce reduce_scatter reduce; do
    timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np $np $X .dev/ccl-perf $op \
      -b 1000 -e 20000000 -f 20 -n 2 -w 1 -c 1 --mem device -d all -o all > /tmp/c.log 2>&1
    rows /tmp/c.log "check np $np $op every type x reduction (exit $?)"
  done
done
} 2>&1 | tee $O/5-stage-in.txt
