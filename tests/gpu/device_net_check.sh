#!/usr/bin/env bash
# The network path's correctness on one machine: every operation, 8 B..$MAX in steps of 8x,
# two processes over loopback (NCCL_P2P_DISABLE / NCCL_SHM_DISABLE), results checked
# (-c 1), for each memory kind in $MEMS (host; device: GPU memory, both ranks on one GPU if
# there is only one). Prints one line per operation and memory: wrong results summed over
# every size, and the busbw at the largest size. Exit status 1 if anything was wrong or a
# run failed. Logs under $OUT/netcheck.
set -uo pipefail
OUT=${OUT:-/tmp/out}; L=$OUT/netcheck; mkdir -p "$L"; CCL=${CCL:-$PWD/.dev}
fail=0
for m in ${MEMS:-host device}; do
  for op in ${OPS:-all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter}; do
    log=$L/$op.$m.log
    LD_LIBRARY_PATH=$CCL NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt timeout -s KILL 120 \
      mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x NCCL_P2P_DISABLE \
      -x NCCL_SHM_DISABLE -x CCL_NET .dev/ccl-perf $op -b 8 -e ${MAX:-128M} -f 8 -n ${ITERS:-3} -w 1 \
      -c 1 --mem $m > "$log" 2>&1
    rc=$?
    rows=$(grep -cE '^ +[0-9]' "$log")
    wrong=$(grep -E '^ +[0-9]' "$log" | awk '{ for (i = 9; i <= NF; i++) if ($i ~ /^[0-9]+$/ && (i == 9 || i == NF)) w += $i } END { print w + 0 }')
    big=$(grep -E '^ +[0-9]' "$log" | tail -n 1 | awk '{print $8}')
    printf "%-15s %-6s rc %d, %d sizes, wrong %d, busbw at the largest %s GB/s\n" $op $m $rc $rows $wrong "$big"
    [ $rc = 0 ] && [ $wrong = 0 ] && [ $rows -gt 0 ] || fail=1
  done
done
exit $fail
