#!/usr/bin/env bash
# The throughput monitor on the GPU path, in one device call: NVIDIA's nccl-tests all_reduce and
# sendrecv at 1 MiB and 64 MiB under mpirun, CCL_MONITOR off and on alternately (REPS pairs, off first in odd ones, on first in even):
# busbw (out of place, rank 0's line) and the CPU time of the whole run (getrusage of mpirun's
# children), with on/off ratios of the medians; then, from the last "on" run's JSON lines,
# `ccl-monitor summary` (the copy-engine transfers' records: engine copy_engine, per peer).
#
#   NGPU=2 tests/gpu/device_monitor.sh                      (two GPUs)
#   MPS=1 NGPU=2 NCCL_TESTS_DEVICE=0 tests/gpu/device_monitor.sh   (one GPU, under MPS)
# LIB (default .dev) holds libnccl.so.2; .dev/ccl-monitor the tool (cargo build --release -p
# ccl-monitor-tool). OPS and SIZES choose the cases (with more than two ranks, all_gather and
# alltoall show the batched copies timed as a whole). Summary in $OUT/monitor.md.
set -uo pipefail
OUT=${OUT:-/tmp/out}; L=$OUT/monitor; mkdir -p "$L"; S=$OUT/monitor.md; : > "$S"
LIB=${LIB:-.dev}; NGPU=${NGPU:-2}; REPS=${REPS:-3}
source tests/gpu/mps.sh
bash tests/gpu/nccl_tests_build.sh "$L" || exit 1
say() { echo "$*" | tee -a "$S"; }
run() { # OP SIZE MON TAG
  local op=$1 size=$2 mon=$3 tag=$4
  CCL_MONITOR=$mon CCL_MONITOR_FILE=$L/$tag.%p.jsonl LD_LIBRARY_PATH=$PWD/$LIB python3 -c '
import resource, subprocess, sys
rc = subprocess.run(sys.argv[2:]).returncode
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{u.ru_utime + u.ru_stime:.3f}\n")
sys.exit(rc)' "$L/$tag.cpu" timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np "$NGPU" \
    -x LD_LIBRARY_PATH -x CCL_MONITOR -x CCL_MONITOR_FILE ${NCCL_TESTS_DEVICE:+-x NCCL_TESTS_DEVICE} \
    ${CUDA_MPS_PIPE_DIRECTORY:+-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY} \
    .dev/nccl-tests/build/${op}_perf -b "$size" -e "$size" -n 200 -w 20 -c 1 > "$L/$tag.log" 2>&1
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
say "| op | size | busbw off | busbw on | on/off | CPU s off | CPU s on | on/off | #wrong |"
say "|---|---|---:|---:|---:|---:|---:|---:|---:|"
for op in ${OPS:-all_reduce sendrecv}; do
  for size in ${SIZES:-1M 64M}; do
    for rep in $(seq 1 "$REPS"); do
      # Off first in odd pairs, on first in even ones (a drift weighs on both alike).
      order="0 1"; [ $((rep % 2)) = 0 ] && order="1 0"
      for mon in $order; do run "$op" "$size" "$mon" "$op.$size.m$mon.$rep"; done
    done
    bw() { for f in "$L"/$op.$size.m$1.*.log; do grep -aE '^ +[0-9]+ +[0-9]+ ' "$f" | awk '{print $8}' | head -1; done | median; }
    cpu() { cat "$L"/$op.$size.m$1.*.cpu | median; }
    wrong=$(cat "$L"/$op.$size.m*.log | grep -aE '^ +[0-9]+ +[0-9]+ ' | awk '{s += $9 + $13} END {print s}')
    b0=$(bw 0); b1=$(bw 1); c0=$(cpu 0); c1=$(cpu 1)
    say "| $op | $size | $b0 | $b1 | $(awk -v a="$b1" -v b="$b0" 'BEGIN {printf "%.3f", a / b}') | $c0 | $c1 | $(awk -v a="$c1" -v b="$c0" 'BEGIN {printf "%.3f", a / b}') | $wrong |"
  done
done
if [ -x .dev/ccl-monitor ]; then
  f=$(ls -t "$L"/*.m1.*.jsonl 2>/dev/null | head -n 1)
  say "## ccl-monitor summary of ${f##*/}"
  [ -n "$f" ] && .dev/ccl-monitor summary "$f" 2>&1 | head -n 40 | tee -a "$S"
fi
