#!/usr/bin/env bash
# The packed low-latency lines, best of three interleaved runs on two H200s (nvidia-h200-x2):
# NVIDIA nccl-tests for the five operations on the low-latency kernels, 8 B - 1 MiB (-f 2,
# -n 50 -w 10, checking on), beside NVIDIA NCCL 2.28.9: cur = the build before (.dev/new),
# pk = packed lines with a fenced acknowledgement, pkf = packed lines, acknowledgement unfenced.
set -uo pipefail
O=${OUT:-/tmp/out}
OUT=$O/reps REPS=3 OPS="all_reduce all_gather broadcast reduce reduce_scatter" \
  LIBS="nccl cur=.dev/new pk=.dev/pk pkf=.dev/pkf" NGPU=2 \
  EXTRA="-b 8 -e 1M -f 2 -n 50 -w 10" bash tests/gpu/nccl_tests_ab.sh > "$O/reps.txt" 2>&1
grep -v "exit 0" "$O/reps/nccltests/exits.txt"
grep -E "#wrong" "$O/reps/nccltests.md"
cd "$O" && tar czf reps-logs.tgz reps && rm -rf reps/nccltests
