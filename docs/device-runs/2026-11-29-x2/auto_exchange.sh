#!/usr/bin/env bash
# nvidia-h200-x2, one call: CCL_IPC_LL_EXCHANGE_BYTES=auto (2 MiB with two ranks) against the
# build before it (512 KiB) and NVIDIA NCCL, nccl-tests nine ops 8 B - 16 MiB eager, then the
# copy ops 64 KiB - 16 MiB captured (-G 5). Carry .dev (.dev/new: before, .dev/auto: after).
set -uo pipefail
export NCCL_NVLS_ENABLE=0
O=${OUT:-/tmp/out}
OUT=$O/eager LIBS="nccl new=.dev/new auto=.dev/auto" NGPU=2 EXTRA="-b 8 -e 16M -f 2" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
OUT=$O/graph OPS="all_gather alltoall broadcast gather scatter sendrecv" LIBS="nccl new=.dev/new auto=.dev/auto" NGPU=2 \
  EXTRA="-b 64K -e 16M -f 4 -G 5" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
for m in eager graph; do
  for n in new auto; do
    echo "## $m: $n against nccl, every size (busbw ratio; time ratio for the latency rows)"
    .dev/ccl-report $O/$m/nccltests --base nccl --lib $n
  done
  grep "#wrong" $O/$m/nccltests.md
done > $O/auto_exchange.md 2>&1
cd $O && tar czf logs.tgz eager graph && rm -rf eager/nccltests graph/nccltests
