#!/usr/bin/env bash
# Issue 6: does the multipath transport lose its throughput to engine threads parking and
# waking? One link one way (mpt_udp_throughput) and ccl-perf sendrecv on host memory (two
# processes over loopback), engines parked at once (CCL_MPT_SPIN_US=0) against spinning a
# while first, with and without congestion control; then a system-wide cpu-clock profile
# of the default run (idle share, threads, top symbols) when .dev/perf is carried
# (tests/gpu/pack_perf.sh). Logs under $OUT/spin.
set -uo pipefail
OUT=${OUT:-/tmp/out}; L=$OUT/spin; mkdir -p "$L"; CCL=$PWD/.dev
echo "cpus $(nproc)"
for s in ${SPINS:-0 200}; do
  timeout 120 .dev/mpt_udp_throughput 8 --engines ${RAW_ENGINES:-1,4,8} --frame 4194304 --mib 4096 --spin $s 2>&1 | sed "s/^/spin $s: /" | grep GB/s
done
SIZE=${SIZE:-128M}
perf_run() {  # label, env...
  local label=$1; shift
  for op in ${OPS:-sendrecv}; do
    log=$L/$op.$label.log
    env "$@" LD_LIBRARY_PATH=$CCL NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt timeout -s KILL 120 \
      mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x NCCL_P2P_DISABLE \
      -x NCCL_SHM_DISABLE -x CCL_NET -x CCL_MPT_ENGINES -x CCL_MPT_SPIN_US -x CCL_MPT_CC -x CCL_COPY_THREADS \
      .dev/ccl-perf $op -b $SIZE -e $SIZE -n ${ITERS:-100} -w 3 -c 1 --mem host > "$log" 2>&1 &
    sleep 3
    top -b -H -n 1 -d 1 | awk 'NR > 7 && $9 > 5 {print $12 "=" $9 "%"}' | sort | uniq -c | tr '\n' ' ' > "$log.top"
    if [ "${PROFILE:-0}" = 1 ] && [ -x $CCL/perf/perf ]; then
      LD_LIBRARY_PATH=$CCL/perf/lib $CCL/perf/perf record -a -e cpu-clock -F 999 -o $L/p.data -- sleep 1.5 > /dev/null 2>&1
    fi
    wait
    echo "ccl-perf $op $label: $(grep -E '^ +[0-9]' "$log" | tail -n 1 | awk '{print $8 " GB/s busbw, wrong " $9}') | $(cat "$log.top")"
    if [ -f $L/p.data ]; then
      echo "  by thread name (system-wide, idle included):"
      LD_LIBRARY_PATH=$CCL/perf/lib $CCL/perf/perf report -i $L/p.data --no-children --stdio --sort comm 2>/dev/null | grep -E "^ +[0-9]" | head -n 8
      echo "  top symbols:"
      LD_LIBRARY_PATH=$CCL/perf/lib $CCL/perf/perf report -i $L/p.data --no-children --stdio --sort comm,symbol 2>/dev/null | grep -E "^ +[0-9]" | head -n 25
      rm -f $L/p.data
    fi
  done
}
PROFILE=1 perf_run e8-spin0 CCL_MPT_ENGINES=8 CCL_MPT_SPIN_US=0
perf_run e8-spin200 CCL_MPT_ENGINES=8 CCL_MPT_SPIN_US=200
perf_run e4-spin200 CCL_MPT_ENGINES=4 CCL_MPT_SPIN_US=200
perf_run e8-ccnone CCL_MPT_ENGINES=8 CCL_MPT_CC=none
PROFILE=1 perf_run e8-ccnone-spin200 CCL_MPT_ENGINES=8 CCL_MPT_CC=none CCL_MPT_SPIN_US=200
