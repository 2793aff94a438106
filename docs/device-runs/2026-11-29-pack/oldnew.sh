#!/usr/bin/env bash
# Issue 40's before / after on two H200s (nvidia-h200-x2) with the build of 245a99c in .dev/new
# and 8269214 (before the restructuring) in .dev/old: NVIDIA nccl-tests nine ops 8 B - 512 MiB
# (-f 4) beside NVIDIA NCCL 2.28.9, then 2 MiB best of three (-n 200 -w 20).
set -uo pipefail
O=${OUT:-/tmp/out}
OUT=$O/ab LIBS="nccl old=.dev/old new=.dev/new" NGPU=2 bash tests/gpu/nccl_tests_ab.sh > "$O/ab.txt" 2>&1
cat "$O/ab/nccltests.md"
OUT=$O/two REPS=3 LIBS="nccl old=.dev/old new=.dev/new" NGPU=2 EXTRA="-b 2M -e 2M -n 200 -w 20" \
  bash tests/gpu/nccl_tests_ab.sh > "$O/two.txt" 2>&1
cat "$O/two/nccltests.md"
cd "$O" && tar czf oldnew-logs.tgz ab two && rm -rf ab/nccltests two/nccltests
