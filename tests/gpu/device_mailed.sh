#!/usr/bin/env bash
# Mailed sends (CCL_IPC_MAILED_PUSH=1) on the device, beside the default push waits, in one
# call: the CUDA backend's mail-copy kernel test (.dev/gpu_backend_test, if built), NVIDIA's
# nccl-tests nine ops under mpirun for LIB with and without mailed sends (and mailed under
# CUDA_DEVICE_MAX_CONNECTIONS=1, where the kernel itself waits for the receiver: CONN1_OPS,
# default sendrecv all_gather alltoall), every
# result checked, then sendrecv at 128 MiB with NCCL_DEBUG=INFO to count mailed sends and the
# host time spent waiting. Summary in $OUT/mailed.md.
#
#   LIB=.dev/new NGPU=2 tests/gpu/device_mailed.sh               (two GPUs)
#   LIB=.dev/new NGPU=2 NCCL_TESTS_DEVICE=0 tests/gpu/device_mailed.sh   (one GPU, both ranks on it)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/mailed.md; : > "$S"
LIB=${LIB:-.dev/new}; NGPU=${NGPU:-2}
say() { echo "$*" | tee -a "$S"; }
if [ -x .dev/gpu_backend_test ]; then
  timeout -s KILL 120 .dev/gpu_backend_test --test-threads=1 mail_copy wait_copy \
    > "$OUT/gpu_backend_test.log" 2>&1
  say "gpu_backend_test mail_copy wait_copy: $(grep -E 'test result' "$OUT/gpu_backend_test.log" || echo "exit $?")"
fi
MAIL="CCL_IPC_MAILED_PUSH=1"
OUT=$OUT/ab LIBS="default=$LIB mailed=$LIB" ENVS_mailed="$MAIL" \
  bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
say "## nine ops, default push waits vs mailed sends (busbw ratio mailed/default)"
cat "$OUT/ab/nccltests.md" >> "$S"
OUT=$OUT/conn1 OPS=${CONN1_OPS:-sendrecv all_gather alltoall} CUDA_DEVICE_MAX_CONNECTIONS=1 LIBS="default=$LIB mailed=$LIB" ENVS_mailed="$MAIL" \
  bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
say "## the same under CUDA_DEVICE_MAX_CONNECTIONS=1"
cat "$OUT/conn1/nccltests.md" >> "$S"
for mode in default mailed; do
  envs=""; [ $mode = mailed ] && envs=$MAIL
  fwd=$(for kv in $envs; do printf -- '-x %s ' "${kv%%=*}"; done)
  env $envs NCCL_DEBUG=INFO LD_LIBRARY_PATH=$PWD/$LIB timeout -s KILL 120 mpirun --allow-run-as-root \
    --bind-to none -np "$NGPU" -x LD_LIBRARY_PATH -x NCCL_DEBUG $fwd \
    ${NCCL_TESTS_DEVICE:+-x NCCL_TESTS_DEVICE} .dev/nccl-tests/build/sendrecv_perf \
    -b 128M -e 128M -c 1 -n 50 > "$OUT/sendrecv_info.$mode.log" 2>&1
  say "sendrecv 128 MiB $mode: $(grep -aE 'sends posted before their receives' "$OUT/sendrecv_info.$mode.log" | sed 's/.*rank/rank/' | tr '\n' ' ')"
  say "  wrong: $(grep -aE '^ +134217728' "$OUT/sendrecv_info.$mode.log" | awk '{print $9, $13}')"
done
