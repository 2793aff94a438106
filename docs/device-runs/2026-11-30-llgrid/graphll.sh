#!/usr/bin/env bash
# Small collectives captured into CUDA graphs as the low-latency kernels (CCL_GRAPH_LL=1, the
# default) against the CCL_GRAPH_DIRECT paths (CCL_GRAPH_LL=0) and NVIDIA NCCL, nccl-tests
# -G 10 (the GPU's time alone) with checking, 8 B - 4 MiB, then the same eager, two H200s:
#   bash docs/device-runs/2026-11-30-llgrid/graphll.sh    (carry .dev; logs in $OUT/graphll-*.tgz)
set -uo pipefail
O=${OUT:-/tmp/out}
L=${LIB:-.dev/new}
export ENVS_noll=CCL_GRAPH_LL=0
OPS=${OPS:-all_reduce broadcast all_gather reduce_scatter reduce alltoall gather scatter}
for mode in graph eager; do
  g="-G 10"; libs="nccl ll=$L noll=$L"
  [ $mode = eager ] && g="" && libs="nccl ll=$L"
  OUT=$O/graphll-$mode LIBS="$libs" NGPU=2 OPS="$OPS" EXTRA="-b 8 -e 4M -f 4 -n 50 -w 10 $g" \
    timeout ${LIMIT:-200} bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
  for v in ${libs#nccl }; do
    n=${v%%=*}
    .dev/ccl-report "$O/graphll-$mode/nccltests" --base nccl --lib "$n" 2>/dev/null | grep -E "^\| (size|\*\*median|\*\*lowest)|wrong" | sed "s/^/$mode $n /"
  done
  grep -h "exit [^0]" "$O/graphll-$mode/nccltests/exits.txt"
  (cd "$O" && tar czf "graphll-$mode.tgz" "graphll-$mode/nccltests" && rm -rf "graphll-$mode")
done
