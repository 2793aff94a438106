#!/usr/bin/env bash
# Issue 6: latency of small operations over the network path between two processes on one
# host (loopback), host memory unless MEM says otherwise. The settings of $SETS
# ("label:VAR=v,VAR=v ..."; every label's vars are passed to both ranks) are alternated
# $REPEAT times; each run is ccl-perf $OP over 8 B .. $MAX with checking, and prints the time
# per operation (us, out of place) per size. The baseline in the same call is libccl's own
# TCP socket transport (`socket`). CCL: folder with libnccl.so.2 (default .dev). NP: ranks
# (default 2). SHM_DISABLE=0: ranks on one host talk over shared memory (default 1: the network path).
# Logs under $OUT/small.
set -uo pipefail
OUT=${OUT:-/tmp/out}; L=$OUT/small; mkdir -p "$L"; CCL=${CCL:-$PWD/.dev}
SETS=${SETS:-"socket:CCL_NET=socket mpt1:CCL_NET=mpt,CCL_MPT_ENGINES=1 mpt:CCL_NET=mpt"}
echo "cpus $(nproc)"
for op in ${OPS:-all_reduce sendrecv}; do
  for r in $(seq ${REPEAT:-2}); do
    for set in $SETS; do
      label=${set%%:*}; vars=${set#*:}; envs=$(echo "$vars" | tr ',' ' ')
      log=$L/$op.$label.$r.log
      env $envs NCCL_DEBUG=${DEBUG:-WARN} LD_LIBRARY_PATH=$CCL NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=${SHM_DISABLE:-1} \
        timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np ${NP:-2} -x NCCL_DEBUG -x LD_LIBRARY_PATH \
        -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE $(for v in ${vars//,/ }; do echo -n "-x ${v%%=*} "; done) \
        .dev/ccl-perf $op -b 8 -e ${MAX:-1M} -f ${STEP:-8} -n ${ITERS:-500} -w 20 -c 1 --mem ${MEM:-host} > "$log" 2>&1
      printf "%-10s %-8s run %d:" $op $label $r
      grep -E '^ +[0-9]' "$log" | awk '{w += $9; printf " %s=%s", $1, $6} END {printf "  (wrong %d)\n", w}'
    done
  done
done
