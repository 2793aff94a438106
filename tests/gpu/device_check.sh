#!/usr/bin/env bash
# Correctness sweep on the GPU machine: the nine ops through libccl, as -g N (one process) and
# as mpirun -np N, every size of -b..-e with checking. Logs to $OUT/logs/check.*.log and a
# one-line verdict per run. Env: NGPU (N, default 2), CHECK_ARGS (ccl-perf size/type args),
# CHECK_MODES ("gN mpi": a mode starting with g is one process), CHECK_TIMEOUT (seconds per run).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"
NGPU=${NGPU:-2}
OPS=${*:-all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter}
ARGS=${CHECK_ARGS:--b 8 -e 256M -f 32 -n 3 -w 1 -c 1}
T=${CHECK_TIMEOUT:-40}
for mode in ${CHECK_MODES:-g$NGPU mpi}; do
  for op in $OPS; do
    log=$L/check.$mode.$op.log
    if [ "${mode#g}" != "$mode" ]; then
      LD_LIBRARY_PATH=$CCL timeout -s KILL $T .dev/ccl-perf $op $ARGS -g $NGPU > "$log" 2>&1
    else
      LD_LIBRARY_PATH=$CCL timeout -s KILL $T mpirun --allow-run-as-root --bind-to none -np $NGPU \
        -x LD_LIBRARY_PATH -x NCCL_DEBUG -x CCL_IPC_DISABLE .dev/ccl-perf $op $ARGS > "$log" 2>&1
    fi
    rc=$?
    wrong=$(awk '/^ +[0-9]/ {w += $9 + $13} END {print w+0}' "$log")
    rows=$(grep -c '^ *[0-9]' "$log")
    echo "check $mode $op: exit $rc, $rows sizes, wrong $wrong"
  done
done
