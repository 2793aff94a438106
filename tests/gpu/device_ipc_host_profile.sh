#!/usr/bin/env bash
# Where the caller's host time goes on the cuda-ipc path (issue 7: Megatron's launch thread is
# the critical path under CUDA_DEVICE_MAX_CONNECTIONS=1). Two ranks as processes (on one GPU
# when the machine has one), GPU memory, each of $OPS (default "all_gather reduce_scatter")
# at $SIZE bytes (default 8M), $ITERS iterations: prints libccl's own account of the host time
# it spent queueing groups (NCCL_DEBUG=INFO, printed at destroy) and, with PROFILE=1 (the
# default), a perf profile of rank 0's calling thread (perf carried in .dev/perf) for 2 s of a
# long run. CCL: folder with libnccl.so.2 (default .dev); ENV: extra VAR=value words for libccl.
# Logs under $OUT/ipc_host.
set -uo pipefail
OUT=${OUT:-/tmp/out}; L=$OUT/ipc_host; mkdir -p "$L"; CCL=${CCL:-$PWD/.dev}
PERF=$PWD/.dev/perf/perf; export PERF_LIB=$PWD/.dev/perf/lib
export CUDA_DEVICE_MAX_CONNECTIONS=${MAX_CONNECTIONS:-1} NCCL_NVLS_ENABLE=0
SIZE=${SIZE:-8M}
run() { # op iters log [extra env words]
  local op=$1 iters=$2 log=$3; shift 3
  # shellcheck disable=SC2086
  env "$@" ${ENV:-} LD_LIBRARY_PATH="$CCL" timeout -s KILL 120 mpirun --allow-run-as-root \
    --bind-to none -np 2 $(env "$@" ${ENV:-} env | grep -oE '^(CCL|NCCL|CUDA)_[A-Z0-9_]+' | sed 's/^/-x /') \
    -x LD_LIBRARY_PATH .dev/ccl-perf "$op" -b "$SIZE" -e "$SIZE" -n "$iters" -w 10 -c 0 \
    --mem device > "$log" 2>&1
}
for op in ${OPS:-all_gather reduce_scatter}; do
  run "$op" "${ITERS:-500}" "$L/$op.info.log" NCCL_DEBUG=INFO
  echo "### $op $SIZE: $(grep -E '^ +[0-9]' "$L/$op.info.log" | awk '{print $6 " us"}')"
  sed 's/\x1b\[[0-9;]*m//g' "$L/$op.info.log" | grep -oE "rank [0-9]: cuda-ipc queued [0-9]+ groups.*" | sort -u
  sed 's/\x1b\[[0-9;]*m//g' "$L/$op.info.log" | grep -oE "rank 0: .*(push|waited|wait).*" | sort -u | head -n 5
  [ "${PROFILE:-1}" = 1 ] || continue
  run "$op" 100000000 "$L/$op.perf.log" &
  sleep 8
  pid=$(pgrep -x ccl-perf | head -n 1)
  LD_LIBRARY_PATH=$PERF_LIB $PERF record -e cpu-clock -F 4000 -g -t "$pid" -o "$L/$op.data" -- sleep 2 > /dev/null 2>&1
  pkill -KILL -x ccl-perf; pkill -KILL mpirun; wait
  rep() { LD_LIBRARY_PATH=$PERF_LIB $PERF report -i "$L/$op.data" --stdio "$@" 2>/dev/null | grep -E "^ +[0-9]"; }
  echo "#### $op: rank 0's calling thread, self"; rep --no-children --sort dso,symbol | head -n 25
  echo "#### $op: inclusive"; rep --children --sort symbol -g none | head -n 45
done
