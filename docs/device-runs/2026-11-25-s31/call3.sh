#!/usr/bin/env bash
# Session 31, call 3: group_comm_order.c with its inputs synchronised (cudaMemcpy from pageable
# memory may return before the bytes land; the stale receives of call 2 were that): staged x6,
# cuda-ipc x4, this session's library; then the one-GPU regression round (RUNS=2).
set -uo pipefail
export ONE_GPU=1 GROUP_ORDER_TIMEOUT_S=60
OUT=${OUT:-/tmp/out}; L=$OUT/gco; mkdir -p "$L"; S=$OUT/gco.md; : > "$S"
M="mpirun --allow-run-as-root --bind-to none -np 2 -x ONE_GPU -x GROUP_ORDER_TIMEOUT_S"
mpicc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/group_comm_order.c \
  -L .dev -Wl,-rpath,$PWD/.dev -l:libnccl.so.2 -L /usr/local/cuda/lib64 \
  -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -o /tmp/gco > "$L/build.log" 2>&1 || cat "$L/build.log"
one() {  # name extra-mpirun-args
  local name=$1; shift
  timeout -s KILL 90 $M "$@" /tmp/gco > "$L/$name.log" 2>&1
  echo "$name: exit $?: $(grep -h -E 'PASS|FAIL|wrong in|handles' "$L/$name.log" | head -n 6 | tr '\n' ' ')" | tee -a "$S"
}
for k in 1 2 3 4 5 6; do one staged_$k -x CCL_IPC_DISABLE=1; done
for k in 1 2 3 4; do one ipc_$k; done
unset GROUP_ORDER_TIMEOUT_S
RUNS=2 bash tests/gpu/device_one_gpu.sh > "$OUT/one_gpu.out" 2>&1
tar czf "$OUT/gco_logs.tgz" -C "$OUT" gco && rm -rf "$L" "$OUT/logs"
