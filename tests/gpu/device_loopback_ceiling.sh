#!/usr/bin/env bash
# Issue 6: what the machine's loopback carries with no libccl in the way, beside what libccl's
# transports reach on the same machine in the same call (host memory, two processes; no GPU
# needed). Prints one line per measurement; logs under $OUT/ceiling.
#   tests/bench/loopback_ceiling.c: N-thread memcpy, N UDP / TCP sender-receiver pairs
#   .dev/mpt_udp_throughput: one MptLink one way, 1..8 engines
#   .dev/ccl-perf --mem host: sendrecv and all_reduce at 128 MiB, mpt with 2/4/8 engines, socket
# Env: PAIRS ("1 2 4 8 16"), ENGINES ("2 4 8"), OPS ("sendrecv all_reduce"), SIZE (128M).
set -uo pipefail
OUT=${OUT:-/tmp/out}; L=$OUT/ceiling; mkdir -p "$L"
CCL=$PWD/.dev
echo "cpus $(nproc); $(lscpu | grep -E 'Model name' | sed 's/  */ /g'); rmem_max $(sysctl -n net.core.rmem_max)"
cc -O2 -pthread -o "$L/lc" tests/bench/loopback_ceiling.c || exit 1
for n in ${PAIRS:-1 2 4 8 16}; do "$L/lc" copy $n 1 2; done
for n in ${PAIRS:-1 2 4 8 16}; do "$L/lc" udp $n 32768 2 0; "$L/lc" udp $n 32768 2 1; done
for n in ${PAIRS:-1 2 4 8 16}; do "$L/lc" tcp $n 1048576 2 1; done
timeout 120 .dev/mpt_udp_throughput 8 --engines 1,2,4,8 --mib 2048 2>&1 | grep "GB/s"
SIZE=${SIZE:-128M}
run() {  # label, env...
  local label=$1; shift
  for op in ${OPS:-sendrecv all_reduce}; do
    log=$L/$op.$label.log
    env "$@" LD_LIBRARY_PATH=$CCL NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 timeout -s KILL 120 \
      mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x NCCL_P2P_DISABLE \
      -x NCCL_SHM_DISABLE -x CCL_NET -x CCL_MPT_ENGINES -x CCL_COPY_THREADS \
      .dev/ccl-perf $op -b $SIZE -e $SIZE -n ${ITERS:-300} -w 3 -c 1 --mem host > "$log" 2>&1 &
    sleep 3; top -b -H -n 1 -d 1 | awk 'NR > 7 && $9 > 5 {print $12 "=" $9 "%"}' | sort | uniq -c | tr '\n' ' ' > "$log.top"
    wait
    echo "ccl-perf $op $label: $(grep -E '^ +[0-9]' "$log" | tail -n 1 | awk '{print $8 " GB/s busbw, wrong " $9}') | threads: $(cat "$log.top")"
  done
}
for e in ${ENGINES:-2 4 8}; do run mpt-e$e CCL_NET=mpt CCL_MPT_ENGINES=$e; done
run socket CCL_NET=socket CCL_MPT_ENGINES=1
