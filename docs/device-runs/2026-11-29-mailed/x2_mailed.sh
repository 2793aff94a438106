#!/usr/bin/env bash
# Mailed sends (CCL_IPC_MAILED_PUSH=1) on two H200s (nvidia-h200-x2), in one call: NVIDIA's
# nccl-tests beside NVIDIA's NCCL and libccl's default push waits (busbw at 8 B / 2 MiB /
# 128 MiB / 512 MiB, #wrong), the copy kernel's block count at 128 MiB, and sendrecv's own
# account of mailed sends and host waits. MEGATRON=1 runs Megatron-core tp2-sp and pp2-1f1b
# instead (NCCL, libccl default, libccl mailed; host time in libccl's calls from NCCL_DEBUG=INFO).
set -uo pipefail
# LIB (default .dev): the libccl build measured, with its default push waits and mailed.
MAIL="CCL_IPC_MAILED_PUSH=1"
if [ "${MEGATRON:-0}" = 1 ]; then
  export CONFIGS=${CONFIGS:-"tp2-sp pp2-1f1b"} LIBS="nccl ccl ccl-b" ITERS=${ITERS:-60} DEADLINE=${DEADLINE:-540}
  export LIBCCL=$PWD/${LIB:-.dev}/libnccl.so.2 LIBCCL_B=$PWD/${LIB:-.dev}/libnccl.so.2
  export CCL_ENV="NCCL_DEBUG=INFO" CCL_ENV_B="NCCL_DEBUG=INFO $MAIL"
  bash tests/megatron/run.sh
  echo "== host time in libccl's calls (rank 0 and 1, per run)"
  for f in "$OUT"/megatron/*.ccl*.log; do
    echo "-- $(basename "$f")"
    grep -hoE "cuda-ipc queued [0-9]+ groups in [0-9.]+ ms of host time.*|[0-9]+ sends posted before their receives.*|direct reductions: .*" "$f" | sort | uniq | head -12
  done
  exit 0
fi
export ENVS_mailed="$MAIL" ENVS_m8="$MAIL CCL_IPC_MAIL_BLOCKS=8" ENVS_m32="$MAIL CCL_IPC_MAIL_BLOCKS=32"
OUT=$OUT/ab LIBS="nccl new=${LIB:-.dev} mailed=${LIB:-.dev}" NGPU=2 bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
cat "$OUT/ab/nccltests.md"; grep -v "exit 0" "$OUT/ab/nccltests/exits.txt"
OUT=$OUT/blocks OPS="sendrecv all_gather alltoall" EXTRA="-b 128M -e 128M" \
  LIBS="new=${LIB:-.dev} m8=${LIB:-.dev} mailed=${LIB:-.dev} m32=${LIB:-.dev}" NGPU=2 bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
cat "$OUT/blocks/nccltests.md"
NCCL_DEBUG=INFO LD_LIBRARY_PATH=$PWD/${LIB:-.dev} CCL_IPC_MAILED_PUSH=1 timeout -s KILL 120 mpirun --allow-run-as-root \
  --bind-to none -np 2 -x LD_LIBRARY_PATH -x NCCL_DEBUG -x CCL_IPC_MAILED_PUSH \
  .dev/nccl-tests/build/sendrecv_perf -b 128M -e 128M -c 1 -n 50 2>&1 | grep -aE "sends posted before|^ +134217728"
cd "$OUT" && tar czf logs.tgz ab blocks && rm -rf ab/nccltests blocks/nccltests
