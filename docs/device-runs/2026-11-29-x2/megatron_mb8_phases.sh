#!/usr/bin/env bash
# nvidia-h200-x2, one call: Megatron tp2-sp at micro-batch 8 (NCCL, libccl .dev/auto), then
# nccl-tests -C 1 host time per call at 8 B and 16 MiB with libccl's phase lines
# (NCCL_DEBUG=INFO). Carry .dev and .whl.
set -uo pipefail
O=${OUT:-/tmp/out}
OUT=$O/mb8 MICRO_BATCH=8 LIBS="nccl ccl" CONFIGS=tp2-sp ITERS=${ITERS:-30} DEADLINE=300 \
  LIBCCL=$PWD/.dev/auto/libnccl.so.2 CCL_ENV="NCCL_DEBUG=INFO" bash tests/megatron/run.sh 2>&1 | tail -n 12
grep -ahoE "cuda-ipc queued [0-9]+ groups in [0-9.]+ ms of host time.*" $O/mb8/megatron/*.ccl*.log | grep -v "queued 2 groups" | head -n 4
OUT=$O/hc LIB=.dev/auto LIBS="nccl default=.dev/auto" SIZES="8 16M" OPS="all_reduce broadcast sendrecv all_gather" NGPU=2 \
  bash tests/gpu/device_host_cost.sh > /dev/null 2>&1
grep -v "^| op\|^|---" $O/hc/host_cost.md | head -n 60
cd $O && tar czf logs.tgz mb8 hc && rm -rf mb8 hc/ab-*
