#!/usr/bin/env bash
# Where a zero-SM 8-byte operation's host time goes: ccl-perf OP -b 8 under mpirun -np 2 with
# CCL_IPC_LL_EXCHANGE_BYTES=0 runs for a while; each thread's CPU share over one second, then a
# cpu-clock profile of rank 0's main thread (perf carried in .dev/perf; tests/gpu/pack_perf.sh).
# OPS (default "alltoall sendrecv"). Writes $OUT/zsm-profile.txt.
set -uo pipefail
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=$OUT/zsm-profile.txt; : > "$R"
export NCCL_NVLS_ENABLE=0
PERF() { LD_LIBRARY_PATH=$CCL/perf/lib $CCL/perf/perf "$@"; }
cpu_of() { awk '{print $14+$15}' "$1" 2>/dev/null || echo 0; }
for op in ${OPS:-alltoall sendrecv}; do
  LD_LIBRARY_PATH=$CCL CCL_IPC_LL_EXCHANGE_BYTES=0 timeout -s KILL 40 mpirun --allow-run-as-root --bind-to none -np 2 \
    -x LD_LIBRARY_PATH -x CCL_IPC_LL_EXCHANGE_BYTES -x NCCL_NVLS_ENABLE .dev/ccl-perf $op -b 8 -e 8 -n 400000 -w 100 -c 0 \
    > "$OUT/zsm-$op.log" 2>&1 &
  sleep 4
  P=$(pgrep -x ccl-perf | head -1)
  declare -A before=()
  for t in /proc/$P/task/*; do before[$t]=$(cpu_of $t/stat); done
  sleep 1
  echo "### $op: rank pid $P, CPU share of each thread over 1 s (comm, %)" >> "$R"
  for t in /proc/$P/task/*; do
    echo "$(cat $t/comm) $(( ($(cpu_of $t/stat) - ${before[$t]:-0}) ))" >> "$R"
  done
  unset before
  PERF record -e cpu-clock -F 2000 --call-graph dwarf,16384 -t $P -o /tmp/zsm.data -- sleep 2 > /dev/null 2>&1
  echo "### $op: main thread, self time" >> "$R"
  PERF report -i /tmp/zsm.data --no-children --stdio --sort dso,symbol -g none 2>/dev/null | grep -E "^ +[0-9]" | head -n 40 >> "$R"
  echo "### $op: main thread, with callees" >> "$R"
  PERF report -i /tmp/zsm.data --children --stdio --sort symbol -g none --percent-limit 2 2>/dev/null | grep -E "^ +[0-9]" | head -n 60 >> "$R"
  pkill -KILL -x ccl-perf; wait
  rm -f /tmp/zsm.data
done
cat "$R"
