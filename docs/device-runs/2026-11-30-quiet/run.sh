#!/usr/bin/env bash
# Host-side figures of issues 42 and 43 on the idle cores of an nvidia-h200-x2 machine (carry
# .dev; .dev/net holds iproute2 6.1.0 and its libraries behind wrappers), and the monitor's
# cost on two GPUs. PART (space-separated, in order):
#   armed    the multipath transport's loss-free busbw, backup armed against plain, sendrecv
#            and alltoall at 64 MiB, PAIRS pairs alternated (issue 42's last open figure)
#   gpumon   monitor on / off, nccl-tests all_reduce and sendrecv, REPS pairs
#   hostmon  monitor on / off on the host backend (multipath, two namespace hosts)
# SIZES (1M) sets gpumon's and hostmon's sizes ("1M 64M": issue 43's four cases).
set -uo pipefail
export PATH=$PWD/.dev/net/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for part in ${PART:-armed gpumon}; do
  case $part in
    armed)
      m=""; for i in $(seq 1 "${PAIRS:-5}"); do m="$m plain armed"; done
      LIBDIR=.dev RANKS_PER_HOST=2 NETS=mpt OPS="${AOPS:-sendrecv alltoall}" ITERS=${ITERS:-150} MODES="$m" \
        timeout "${ARMED_S:-330}" bash tests/bench/failover_measure.sh "$OUT/fo" > "$OUT/armed.txt" 2>&1
      grep -E "armed/plain|^mpt " "$OUT/armed.txt" | tail -n 30; rm -rf "$OUT/fo" ;;
    gpumon)
      OUT=$OUT/gm NGPU=2 REPS=${REPS:-4} SIZES=${SIZES:-1M} timeout "${GPUMON_S:-200}" \
        bash tests/gpu/device_monitor.sh > "$OUT/gpumon.txt" 2>&1
      cat "$OUT/gm/monitor.md"; cp "$OUT/gm/monitor.md" "$OUT/gpumon.md"; rm -rf "$OUT/gm" ;;
    hostmon)
      FILE=1 SIZES=${SIZES:-1M} REPS=${HREPS:-8} LIBDIR=.dev timeout "${HOSTMON_S:-270}" \
        bash tests/bench/monitor_overhead.sh "$OUT/mon" > "$OUT/hostmon.txt" 2>&1
      tail -n 14 "$OUT/hostmon.txt"; rm -rf "$OUT/mon" ;;
  esac
done
