#!/usr/bin/env bash
# Session 31, call 4 (one H100, two ranks as processes on it): group_comm_order.c with rank 1
# calling the collectives one by one (GROUP_ORDER_MIXED=1) and grouped, cuda-ipc and staged:
# the library of commit 1d0fcfe (.dev/cur: a group's communicators queued one after the other
# on a shared stream) and this change (.dev/new: each on a stream of its own, forked from and
# joined to the caller's); then the one-GPU regression round on the new library (RUNS=2).
set -uo pipefail
export ONE_GPU=1 GROUP_ORDER_TIMEOUT_S=45
OUT=${OUT:-/tmp/out}; L=$OUT/gco; mkdir -p "$L"; S=$OUT/gco.md; : > "$S"
M="mpirun --allow-run-as-root --bind-to none -np 2 -x ONE_GPU -x GROUP_ORDER_TIMEOUT_S"
for lib in cur new; do
  mpicc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/group_comm_order.c \
    -L .dev/$lib -Wl,-rpath,$PWD/.dev/$lib -l:libnccl.so.2 -L /usr/local/cuda/lib64 \
    -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -o /tmp/gco_$lib > "$L/build_$lib.log" 2>&1 || cat "$L/build_$lib.log"
done
one() {  # lib name extra-mpirun-args
  local lib=$1 name=$2; shift 2
  timeout -s KILL 60 $M "$@" /tmp/gco_$lib > "$L/${lib}_$name.log" 2>&1
  echo "$lib $name: exit $?: $(grep -h -E 'PASS|FAIL|wrong in' "$L/${lib}_$name.log" | head -n 4 | tr '\n' ' ')" | tee -a "$S"
}
for k in 1 2; do
  one cur mixed_ipc_$k -x GROUP_ORDER_MIXED=1
  one cur mixed_staged_$k -x GROUP_ORDER_MIXED=1 -x CCL_IPC_DISABLE=1
done
for k in 1 2 3 4; do
  one new mixed_ipc_$k -x GROUP_ORDER_MIXED=1
  one new mixed_staged_$k -x GROUP_ORDER_MIXED=1 -x CCL_IPC_DISABLE=1
  one new grouped_ipc_$k
  one new grouped_staged_$k -x CCL_IPC_DISABLE=1
done
unset GROUP_ORDER_TIMEOUT_S
cp .dev/new/libnccl.so.2 .dev/libnccl.so.2.tmp && mv .dev/libnccl.so.2.tmp .dev/libnccl.so.2
RUNS=2 bash tests/gpu/device_one_gpu.sh > "$OUT/one_gpu.out" 2>&1
tar czf "$OUT/gco_logs.tgz" -C "$OUT" gco && rm -rf "$L" "$OUT/logs"
