#!/usr/bin/env bash
# Session 31, call 7 (one H100): the final library (ff7131e, .dev): group_comm_order.c on two
# ranks (staged against one-by-one calls x2, staged and cuda-ipc grouped) and on four ranks on
# emulated hosts (hierarchical, against one-by-one calls x2, grouped); then checked sweeps: the
# hierarchy alone (4 ranks, emulated hosts: all_reduce, all_gather, broadcast, reduce_scatter),
# -g 2 all_reduce / sendrecv / alltoall and mpirun -np 2 all_reduce.
set -uo pipefail
export ONE_GPU=1 GROUP_ORDER_TIMEOUT_S=90 GROUP_ORDER_ROUNDS=5 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"; S=$OUT/summary.md; : > "$S"
say() { echo "$*" | tee -a "$S"; }
cat > /tmp/pairs.sh <<'W'
#!/bin/bash
export CCL_HOSTID=emulated-host-$((OMPI_COMM_WORLD_RANK / 2))
exec "$@"
W
chmod +x /tmp/pairs.sh
mpicc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/group_comm_order.c \
  -L .dev -Wl,-rpath,$PWD/.dev -l:libnccl.so.2 -L /usr/local/cuda/lib64 \
  -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -o /tmp/gco > "$L/build.log" 2>&1 || cat "$L/build.log"
M="mpirun --allow-run-as-root --bind-to none"
one() {  # name np wrapper extra-mpirun-args
  local name=$1 np=$2 wrap=$3; shift 3
  timeout -s KILL 110 $M -np $np -x ONE_GPU -x GROUP_ORDER_TIMEOUT_S -x GROUP_ORDER_ROUNDS \
    -x NCCL_NVLS_ENABLE "$@" $wrap /tmp/gco > "$L/$name.log" 2>&1
  say "$name: exit $?: $(grep -h -E 'PASS|FAIL|wrong in' "$L/$name.log" | head -n 3 | tr '\n' ' ')"
}
for k in 1 2; do one np2_staged_mixed_$k 2 "" -x CCL_IPC_DISABLE=1 -x GROUP_ORDER_MIXED=1; done
one np2_staged 2 "" -x CCL_IPC_DISABLE=1
one np2_ipc 2 ""
for k in 1 2; do one np4_hier_mixed_$k 4 /tmp/pairs.sh -x GROUP_ORDER_MIXED=1; done
one np4_hier_grouped 4 /tmp/pairs.sh
export LD_LIBRARY_PATH=$PWD/.dev
sweep() {  # label timeout command...
  local label=$1 t=$2; shift 2
  timeout -s KILL "$t" "$@" > "$L/$label.log" 2>&1
  local rc=$? rows wrong
  rows=$(grep -cE '^ +[0-9]' "$L/$label.log")
  wrong=$(grep -E '^ +[0-9]' "$L/$label.log" | awk '{w += $9; if ($13 ~ /^[0-9]+$/) w += $13} END {print w + 0}')
  say "$label: exit $rc, $rows rows, $wrong wrong"
}
for op in all_reduce all_gather broadcast reduce_scatter; do
  sweep hier4-$op 150 $M -np 4 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE /tmp/pairs.sh .dev/ccl-perf $op \
    -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int8 --mem device
done
for op in all_reduce sendrecv alltoall; do
  sweep g2-$op 120 $M -np 1 -x LD_LIBRARY_PATH .dev/ccl-perf $op -b 8 -e 64M -f 8 -n 3 -w 1 -c 1 -g 2
done
sweep mpi2-all_reduce 90 $M -np 2 -x LD_LIBRARY_PATH -x ONE_GPU .dev/ccl-perf all_reduce -b 8 -e 64M -f 8 -n 3 -w 1 -c 1
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
