#!/usr/bin/env bash
# NVIDIA nccl-tests on two H200s (nvidia-h200-x2), 2026-11-29: NVIDIA's NCCL, libccl as it is
# (.dev/new) and the same build with every host wait of the copy-engine rendezvous at 0
# ("nowait"), in one call: busbw at 8 B / 2 MiB / 128 MiB / 512 MiB and #wrong.
set -uo pipefail
export ENVS_nowait="CCL_IPC_PUSH_WAIT_US=0 CCL_IPC_PUSH_WAIT_BUSY_US=0 CCL_IPC_EXCHANGE_WAIT_US=0 CCL_IPC_DIRECT_REDUCE_TAKEOVER_US=0"
export LIBS="nccl new=.dev/new nowait=.dev/new" NGPU=2
export OPS=${OPS:-"all_gather alltoall sendrecv all_reduce reduce_scatter broadcast"}
bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
cat "$OUT/nccltests.md"; grep -v "exit 0" "$OUT/nccltests/exits.txt"
cd "$OUT" && tar czf logs.tgz nccltests && rm -rf nccltests
