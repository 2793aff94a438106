#!/usr/bin/env bash
# Session 31, call 2: group_comm_order.c again with every wrong result described: this
# session's library staged (CCL_IPC_DISABLE=1) with the handles in opposite orders (6 runs) and
# in the same order (GROUP_ORDER_SAME=1, 4 runs), and cuda-ipc (2 runs).
set -uo pipefail
export ONE_GPU=1 GROUP_ORDER_TIMEOUT_S=60
OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"; S=$OUT/summary.md; : > "$S"
M="mpirun --allow-run-as-root --bind-to none -np 2 -x ONE_GPU -x GROUP_ORDER_TIMEOUT_S"
lib=${LIB:-new}
mpicc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/group_comm_order.c \
  -L .dev/$lib -Wl,-rpath,$PWD/.dev/$lib -l:libnccl.so.2 -L /usr/local/cuda/lib64 \
  -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -o /tmp/gco > "$L/build.log" 2>&1 || cat "$L/build.log"
one() {  # name extra-mpirun-args
  local name=$1; shift
  timeout -s KILL 90 $M "$@" /tmp/gco > "$L/$name.log" 2>&1
  echo "$name: exit $?: $(grep -h -E 'PASS|FAIL|wrong in' "$L/$name.log" | head -n 6 | tr '\n' ' ')" | tee -a "$S"
}
for k in 1 2 3 4 5 6; do one staged_$k -x CCL_IPC_DISABLE=1; done
for k in 1 2 3 4; do one staged_same_$k -x CCL_IPC_DISABLE=1 -x GROUP_ORDER_SAME=1; done
for k in 1 2; do one ipc_$k; done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
