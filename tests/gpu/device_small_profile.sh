#!/usr/bin/env bash
# Where a small operation's time goes over the network path: $NP ranks (default 4) on this
# host run ccl-perf $OP (default all_reduce) at $SIZE bytes (default 8) over $NET (default
# mpt) in host memory, endlessly; perf (carried in .dev/perf) samples one rank's process for
# 2 s. Prints the top symbols (self time), the top inclusive entries and the split by
# thread. CCL: folder with libnccl.so.2 (default .dev). Logs under $OUT/small_profile.
set -uo pipefail
OUT=${OUT:-/tmp/out}; L=$OUT/small_profile; mkdir -p "$L"; CCL=${CCL:-$PWD/.dev}
PERF=$PWD/.dev/perf/perf; export PERF_LIB=$PWD/.dev/perf/lib
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=${NET:-mpt} LD_LIBRARY_PATH=$CCL \
  timeout -s KILL 60 mpirun --allow-run-as-root --bind-to none -np ${NP:-4} -x LD_LIBRARY_PATH \
  -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x CCL_NET .dev/ccl-perf ${OP:-all_reduce} \
  -b ${SIZE:-8} -e ${SIZE:-8} -n 100000000 -w 10 -c 0 --mem host > "$L/run.log" 2>&1 &
sleep 6
pid=$(pgrep -x ccl-perf | head -n 1)
LD_LIBRARY_PATH=$PERF_LIB $PERF record -e cpu-clock -F 4000 -g -p "$pid" -o "$L/p.data" -- sleep 2 > /dev/null 2>&1
pkill -KILL -x ccl-perf; pkill -KILL mpirun; wait
rep() { LD_LIBRARY_PATH=$PERF_LIB $PERF report -i "$L/p.data" --stdio "$@" 2>/dev/null | grep -E "^ +[0-9]"; }
echo "### self"; rep --no-children --sort symbol | head -n 30
echo "### inclusive"; rep --children --sort symbol -g none | head -n 40
echo "### threads"; rep --no-children --sort comm | head -n 5
