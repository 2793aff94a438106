#!/usr/bin/env bash
# Sends and receives up to 64 KiB on the point-to-point kernel (LL_P2P_BYTES 4 KiB -> 64 KiB)
# against the build before (.dev/p4k) and NVIDIA NCCL, one nvidia-h200-x2 call (carry .dev):
# nccl-tests sendrecv 1 KiB - 1 MiB eager, then host time per call (-C 1), then all_reduce,
# reduce, reduce_scatter 1 - 8 MiB (the 4 MiB low-latency limit on both builds).
set -uo pipefail
O=${OUT:-/tmp/out}
for x in "" "-C 1"; do
  t=eager; [ -n "$x" ] && t=host
  OUT=$O/sr-$t OPS=sendrecv NGPU=2 EXTRA="-b 1K -e 1M -f 2 -n 100 -w 10 $x" \
    LIBS="nccl p4k=.dev/p4k new=.dev/new" timeout ${LIMIT:-90} bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
  for n in p4k new; do
    echo "## $t $n / nccl"; .dev/ccl-report "$O/sr-$t/nccltests" --base nccl --lib $n 2>&1 | grep -E "^\||wrong"
  done
  echo "## $t new / p4k"; .dev/ccl-report "$O/sr-$t/nccltests" --base p4k --lib new 2>&1 | grep -E "^\||wrong"
done
OUT=$O/red OPS="all_reduce reduce reduce_scatter" NGPU=2 EXTRA="-b 1M -e 8M -f 2 -n 50 -w 10" \
  LIBS="nccl new=.dev/new" timeout ${LIMIT:-90} bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
echo "## reductions new / nccl"; .dev/ccl-report "$O/red/nccltests" --base nccl --lib new 2>&1 | grep -E "^\||wrong"
cd "$O" && tar czf p2p64k-logs.tgz sr-* red && rm -rf sr-eager sr-host red
