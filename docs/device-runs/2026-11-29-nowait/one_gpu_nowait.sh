#!/usr/bin/env bash
# The copy-engine rendezvous with and without its host waits, one H200 (nvidia-h200; the
# two-GPU kind was not lent on 2026-11-29): NVIDIA nccl-tests, nine ops, two ranks under mpirun
# sharing GPU 0, the same build (.dev/new, commit in .dev/new/COMMIT) run as "wait" (defaults)
# and "nowait" (every host wait of the rendezvous at 0):
#  1. MODE=check: #wrong for both (the two processes time-slice the GPU: no speed figure);
#  2. MODE=cpu: nccl-tests -C 1, host time per call (the launch loop's time per iteration),
#     with CUDA_DEVICE_MAX_CONNECTIONS=1 as Megatron-LM sets it.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
export NCCL_NVLS_ENABLE=0 NCCL_TESTS_DEVICE=0 NGPU=2
export ENVS_nowait="CCL_IPC_PUSH_WAIT_US=0 CCL_IPC_PUSH_WAIT_BUSY_US=0 CCL_IPC_EXCHANGE_WAIT_US=0 CCL_IPC_DIRECT_REDUCE_TAKEOVER_US=0"
export LIBS="wait=.dev/new nowait=.dev/new"
case ${MODE:-check} in
  check) export CUDA_DEVICE_MAX_CONNECTIONS=32 ;;
  cpu) export CUDA_DEVICE_MAX_CONNECTIONS=1 EXTRA="-C 1" ;;
esac
bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
echo "== nccl-tests MODE=${MODE:-check}, 2 processes on one GPU"
cat "$OUT/nccltests.md"; grep -v "exit 0" "$OUT/nccltests/exits.txt"
cd "$OUT" && tar czf "logs-${MODE:-check}.tgz" nccltests && rm -rf nccltests
