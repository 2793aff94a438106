#!/usr/bin/env bash
# Megatron-core on two H200s (nvidia-h200-x2), 2026-11-29: NVIDIA's NCCL, libccl as it is
# (.dev/new, defaults: a send posted first may wait on the caller's thread for its receive, a
# direct reduction for its peer's post), libccl with every host wait of the copy-engine
# rendezvous at 0 ("ccl-b"), and the build before the restructuring (.dev/old, "ccl-c"), in one
# call: iteration times, losses against NCCL's, and each libccl run's own account of its host
# time (NCCL_DEBUG=INFO at destroy: time spent queueing groups, push waits, reduction waits).
set -uo pipefail
NOWAIT="CCL_IPC_PUSH_WAIT_US=0 CCL_IPC_PUSH_WAIT_BUSY_US=0 CCL_IPC_EXCHANGE_WAIT_US=0 CCL_IPC_DIRECT_REDUCE_TAKEOVER_US=0"
export CONFIGS=${CONFIGS:-"tp2-sp pp2-1f1b"} LIBS="nccl ccl ccl-b ccl-c" ITERS=${ITERS:-60} DEADLINE=${DEADLINE:-540}
export LIBCCL=$PWD/.dev/new/libnccl.so.2 LIBCCL_B=$PWD/.dev/new/libnccl.so.2 LIBCCL_C=$PWD/.dev/old/libnccl.so.2
export CCL_ENV="NCCL_DEBUG=INFO" CCL_ENV_B="NCCL_DEBUG=INFO $NOWAIT" CCL_ENV_C="NCCL_DEBUG=INFO"
bash tests/megatron/run.sh
echo "== host time in libccl's calls (rank 0 and 1, per run)"
for f in "$OUT"/megatron/*.ccl*.log; do
  echo "-- $(basename "$f")"
  grep -hoE "cuda-ipc queued [0-9]+ groups in [0-9.]+ ms of host time.*|[0-9]+ sends posted before their receives.*|direct reductions: .*" "$f" | sort | uniq | head -12
done
