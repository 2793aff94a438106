#!/usr/bin/env bash
# Session 31, call 6 (one H100): group_comm_order.c on 4 ranks as processes on the GPU, two
# emulated hosts (CCL_HOSTID = rank / 2), so A and B are hierarchical (64 MiB: host stages on
# cuda-ipc, cross stages over the network path; 1 KiB: flat): rank 0 groups, the others call
# the collectives one by one (GROUP_ORDER_MIXED=1). Library of commit 5545723 (.dev/cur: forks
# per stage group) against this change (.dev/new: each communicator forked for the whole
# group); then grouped on every rank, and flat (CCL_HIERARCHY=0).
set -uo pipefail
export ONE_GPU=1 GROUP_ORDER_TIMEOUT_S=90 GROUP_ORDER_ROUNDS=5 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"; S=$OUT/summary.md; : > "$S"
cat > /tmp/pairs.sh <<'W'
#!/bin/bash
export CCL_HOSTID=emulated-host-$((OMPI_COMM_WORLD_RANK / 2))
exec "$@"
W
chmod +x /tmp/pairs.sh
for lib in cur new; do
  mpicc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/group_comm_order.c \
    -L .dev/$lib -Wl,-rpath,$PWD/.dev/$lib -l:libnccl.so.2 -L /usr/local/cuda/lib64 \
    -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -o /tmp/gco_$lib > "$L/build_$lib.log" 2>&1 || cat "$L/build_$lib.log"
done
one() {  # lib name extra-mpirun-args
  local lib=$1 name=$2; shift 2
  timeout -s KILL 110 mpirun --allow-run-as-root --bind-to none -np 4 -x ONE_GPU -x GROUP_ORDER_TIMEOUT_S \
    -x GROUP_ORDER_ROUNDS -x NCCL_NVLS_ENABLE "$@" /tmp/pairs.sh /tmp/gco_$lib > "$L/${lib}_$name.log" 2>&1
  echo "$lib $name: exit $?: $(grep -h -E 'PASS|FAIL|wrong in' "$L/${lib}_$name.log" | head -n 3 | tr '\n' ' ') [hierarchy lines: $(grep -c 'hierarchy: 2 ranks on this host' "$L/${lib}_$name.log")]" | tee -a "$S"
}
one new mixed_info -x GROUP_ORDER_MIXED=1 -x NCCL_DEBUG=INFO
one cur mixed_1 -x GROUP_ORDER_MIXED=1 -x NCCL_DEBUG=INFO
for k in 2 3; do one new mixed_$k -x GROUP_ORDER_MIXED=1; done
for k in 1 2; do one new grouped_$k; done
one new flat_mixed -x GROUP_ORDER_MIXED=1 -x CCL_HIERARCHY=0
one cur grouped_1
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
