#!/usr/bin/env bash
# Correctness sweep on the GPU machine: the nine ops through libccl, as -g N (one process) and
# as mpirun -np N, every size of -b..-e with checking. Logs to $OUT/logs/check.*.log and a
# one-line verdict per run. Env: NGPU (N, default 2), CHECK_ARGS (ccl-perf size/type args),
# CHECK_MODES ("gN mpi": a mode starting with g is one process), CHECK_TIMEOUT (seconds per run),
# CHECK_JOBS (runs at once, default 1: the 1 GiB sweep over every type and operator spends most
# of its time checking on the host, so several runs share the GPUs well; correctness only),
# CHECK_TAG (added to log names, for several calls of this script at once with other CHECK_ARGS),
# LIBDIR (the libnccl.so.2 checked, default .dev).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
CCL=$PWD/${LIBDIR:-.dev}; OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"
NGPU=${NGPU:-2}
OPS=${*:-all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter}
ARGS=${CHECK_ARGS:--b 8 -e 256M -f 32 -n 3 -w 1 -c 1}
T=${CHECK_TIMEOUT:-40}
JOBS=${CHECK_JOBS:-1}
TAG=${CHECK_TAG:+.$CHECK_TAG}
one() {
  local mode=$1 op=$2 log=$L/check.$1.$2$TAG.log t0=$SECONDS rc
  if [ "${mode#g}" != "$mode" ]; then
    LD_LIBRARY_PATH=$CCL timeout -s KILL $T .dev/ccl-perf $op $ARGS -g $NGPU > "$log" 2>&1
  else
    LD_LIBRARY_PATH=$CCL timeout -s KILL $T mpirun --allow-run-as-root --bind-to none -np $NGPU \
      -x LD_LIBRARY_PATH -x NCCL_DEBUG -x CCL_IPC_DISABLE .dev/ccl-perf $op $ARGS > "$log" 2>&1
  fi
  rc=$?
  echo "exit $rc after $((SECONDS - t0)) s" > "$log.rc"
}
runs=()
for mode in ${CHECK_MODES:-g$NGPU mpi}; do
  for op in $OPS; do
    runs+=("$mode $op")
    one $mode $op &
    while (($(jobs -rp | wc -l) >= JOBS)); do wait -n; done
  done
done
wait
for r in "${runs[@]}"; do
  set -- $r; log=$L/check.$1.$2$TAG.log
  wrong=$(awk '/^ +[0-9]/ {w += $9 + $13} END {print w+0}' "$log")
  rows=$(grep -c '^ *[0-9]' "$log")
  echo "check $1 $2$TAG: $(cat "$log.rc"), $rows rows, wrong $wrong, largest $(awk '/^ +[0-9]/ {s = $1} END {print s+0}' "$log") B"
done
