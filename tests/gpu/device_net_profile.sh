#!/usr/bin/env bash
# Issue 6: a cpu-clock profile of the network path's executor thread (host memory: ccl-perf's
# main thread; GPU memory: the ccl-proxy thread) with perf carried in .dev/perf (the GPU
# machine has none; tests/gpu/pack_perf.sh puts it there): 128 MiB sendrecv, two processes
# over loopback, libccl defaults. WHO=engine: profile one engine thread (ccl-mpt) instead.
set -uo pipefail
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/profile; mkdir -p "$L"
PERF() { LD_LIBRARY_PATH=$CCL/perf/lib $CCL/perf/perf "$@"; }
PERF --version || exit 1
for mem in ${MEMS:-host device}; do
  for op in ${OPS:-sendrecv}; do
    LD_LIBRARY_PATH=$CCL CCL_NET=mpt NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 timeout -s KILL 60 \
      mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x CCL_NET -x NCCL_SHM_DISABLE \
      -x NCCL_P2P_DISABLE .dev/ccl-perf $op -b 128M -e 128M -n 200 -w 2 -c 0 --mem $mem > "$L/$mem.$op.log" 2>&1 &
    sleep 5
    P=$(pgrep -x ccl-perf | head -1)
    if [ "${WHO:-executor}" = engine ]; then T=$(grep -l ccl-mpt /proc/$P/task/*/comm | head -1 | cut -d/ -f5)
    elif [ $mem = host ]; then T=$P; else T=$(grep -l ccl-proxy /proc/$P/task/*/comm | head -1 | cut -d/ -f5); fi
    PERF record -e cpu-clock -F 1000 --call-graph dwarf,8192 -t $T -o $L/t.data -- sleep 2 > /dev/null 2>&1
    PERF record -e cpu-clock -F 1000 -p $P -o $L/p.data -- sleep 2 > /dev/null 2>&1
    wait
    echo "### ${WHO:-executor} $mem $op: $(grep -E '^ +[0-9]' $L/$mem.$op.log | tail -n 1 | awk '{print $8}') GB/s; executor thread $T of $P, top symbols"
    PERF report -i $L/t.data --no-children --stdio --sort dso,symbol 2>/dev/null | grep -E "^ +[0-9]" | head -n 30
    echo "### $mem $op: executor thread, callers of the top kernel/lock symbols"
    PERF report -i $L/t.data --children --stdio --sort symbol -g none --percent-limit 3 2>/dev/null | grep -E "^ +[0-9]" | head -n 45
    echo "### $mem $op: whole process by thread"
    PERF report -i $L/p.data --no-children --stdio --sort comm 2>/dev/null | grep -E "^ +[0-9]" | head -n 12
    rm -f $L/t.data $L/p.data
  done
done
