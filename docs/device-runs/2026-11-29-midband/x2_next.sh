#!/usr/bin/env bash
# For the first nvidia-h200-x2 call (one mode per device call; carry .dev and .whl):
#   MODE=midband  NVIDIA NCCL beside libccl's exchange thresholds, every size 8 B - 8 MiB,
#                 all-gather / all-to-all / broadcast / gather / scatter / all-reduce /
#                 reduce-scatter (tests/gpu/device_midband.sh; .dev/ccl-report prints every size)
#   MODE=megatron tp2-sp at micro-batch 2 and 8: NCCL, libccl default, libccl with the
#                 low-latency kernels up to 4 MiB (one launch per call: on one H200 under MPS it
#                 cut tp2-sp's host time in libccl from 1514 to 481 ms), libccl with mailed sends
#   MODE=hostcost nccl-tests -C 1 host time per call beside NCCL (tests/gpu/device_host_cost.sh)
set -uo pipefail
LIB=${LIB:-.dev}
case ${MODE:-midband} in
  midband)
    NGPU=2 LIB=$LIB tests/gpu/device_midband.sh > /dev/null 2>&1
    cat "${OUT:-/tmp/out}/midband.md" ;;
  megatron)
    for mb in ${MICRO_BATCHES:-2 8}; do
      OUT=${OUT:-/tmp/out}/mb$mb MICRO_BATCH=$mb LIBS="nccl ccl ccl-b ccl-c" CONFIGS=tp2-sp \
        ITERS=${ITERS:-40} DEADLINE=${DEADLINE:-270} LIBCCL=$PWD/$LIB/libnccl.so.2 \
        CCL_ENV="NCCL_DEBUG=INFO" \
        CCL_ENV_B="NCCL_DEBUG=INFO CCL_IPC_LL_BYTES=4194304 CCL_IPC_LL_EXCHANGE_BYTES=4194304" \
        CCL_ENV_C="NCCL_DEBUG=INFO CCL_IPC_MAILED_PUSH=1" bash tests/megatron/run.sh | tail -n 12
      grep -ahoE "cuda-ipc queued [0-9]+ groups in [0-9.]+ ms of host time" "${OUT:-/tmp/out}"/mb$mb/megatron/*.ccl*.log
    done ;;
  hostcost)
    NGPU=2 LIB=$LIB tests/gpu/device_host_cost.sh > /dev/null 2>&1
    cat "${OUT:-/tmp/out}/host_cost.md" ;;
esac
