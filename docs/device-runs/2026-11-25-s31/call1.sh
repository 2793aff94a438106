#!/usr/bin/env bash
# Session 31, call 1 (one H100, two ranks as processes on it): a group of two communicators
# on one stream, the handles in opposite heap orders on the two ranks (group_comm_order.c),
# with the session-30 library (.dev/cur, communicators ordered by address) and this session's
# (.dev/new, by nonce then rank); cuda-ipc and staged (CCL_IPC_DISABLE=1).
set -uo pipefail
export ONE_GPU=1 GROUP_ORDER_TIMEOUT_S=60
OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"; S=$OUT/summary.md; : > "$S"
M="mpirun --allow-run-as-root --bind-to none -np 2 -x ONE_GPU -x GROUP_ORDER_TIMEOUT_S"
for lib in cur new; do
  mpicc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/group_comm_order.c \
    -L .dev/$lib -Wl,-rpath,$PWD/.dev/$lib -l:libnccl.so.2 -L /usr/local/cuda/lib64 \
    -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -o /tmp/gco_$lib > "$L/build_$lib.log" 2>&1 \
    || { echo "$lib: build failed" | tee -a "$S"; cat "$L/build_$lib.log"; continue; }
  for mode in ipc staged; do
    extra=""; [ $mode = staged ] && extra="-x CCL_IPC_DISABLE=1"
    [ $mode = staged ] && export CCL_IPC_DISABLE=1 || unset CCL_IPC_DISABLE
    for k in 1 2 3; do
      timeout -s KILL 90 $M $extra /tmp/gco_$lib > "$L/${lib}_${mode}_$k.log" 2>&1
      rc=$?
      echo "$lib $mode run $k: exit $rc: $(grep -h -E 'PASS|FAIL|handles' "$L/${lib}_${mode}_$k.log" | tr '\n' ' ')" | tee -a "$S"
    done
  done
done
unset CCL_IPC_DISABLE
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
