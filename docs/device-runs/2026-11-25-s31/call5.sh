#!/usr/bin/env bash
# Session 31, call 5 (one H100): the final library (.dev/new: forks per communicator, the
# mismatch hint) -- group_comm_order.c staged against one-by-one calls x3, grouped staged and
# cuda-ipc x2 each, cuda-ipc against one-by-one calls x1 (expected: ncclInvalidUsage with the
# hint); then the part of the one-GPU regression round call 4 did not reach (its 600 s ran
# out): -g 4 sendrecv / gather / scatter, seven ops under mpirun -np 2, -G 2, torch_graph.py.
set -uo pipefail
export ONE_GPU=1 GROUP_ORDER_TIMEOUT_S=45 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
cp .dev/new/libnccl.so.2 .dev/libnccl.so.2.tmp && mv .dev/libnccl.so.2.tmp .dev/libnccl.so.2
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"; S=$OUT/summary.md; : > "$S"
say() { echo "$*" | tee -a "$S"; }
M="mpirun --allow-run-as-root --bind-to none"
mpicc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/group_comm_order.c \
  -L "$CCL" -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 \
  -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -o /tmp/gco > "$L/build.log" 2>&1 || cat "$L/build.log"
one() {  # name extra-mpirun-args
  local name=$1; shift
  timeout -s KILL 60 $M -np 2 -x ONE_GPU -x GROUP_ORDER_TIMEOUT_S "$@" /tmp/gco > "$L/$name.log" 2>&1
  say "$name: exit $?: $(grep -h -E 'PASS|FAIL|wrong in' "$L/$name.log" | head -n 3 | tr '\n' ' ')"
}
for k in 1 2 3; do one staged_mixed_$k -x CCL_IPC_DISABLE=1 -x GROUP_ORDER_MIXED=1; done
for k in 1 2; do one staged_$k -x CCL_IPC_DISABLE=1; one ipc_$k; done
one ipc_mixed_1 -x GROUP_ORDER_MIXED=1
export LD_LIBRARY_PATH=$CCL
P="$M -np 1 -x LD_LIBRARY_PATH .dev/ccl-perf"
sweep() {  # as device_one_gpu.sh
  local label=$1 t=$2; shift 2
  timeout -s KILL "$t" "$@" > "$L/$label.log" 2>&1
  local rc=$? rows wrong
  rows=$(grep -cE '^ +[0-9]' "$L/$label.log")
  wrong=$(grep -E '^ +[0-9]' "$L/$label.log" | awk '{w += $9; if ($13 ~ /^[0-9]+$/) w += $13} END {print w + 0}')
  say "$label: exit $rc, $rows rows, $wrong wrong"
}
for op in sendrecv gather scatter; do
  sweep "g4-$op" 120 $P $op -b 8 -e 16M -f 16 -n 3 -w 1 -c 1 -g 4 -d float,int8 -r all
done
for op in all_reduce all_gather reduce_scatter broadcast alltoall sendrecv reduce; do
  sweep "mpi2-$op" 90 $M -np 2 -x LD_LIBRARY_PATH -x ONE_GPU .dev/ccl-perf $op -b 8 -e 16M -f 16 -n 3 -w 1 -c 1
done
sweep "g2-graph-all_reduce" 90 $P all_reduce -b 8 -e 4M -f 8 -n 3 -w 1 -c 1 -g 2 -G 2
CCL_GRAPH_ONE_GPU=1 CCL_GRAPH_AHEAD=64 CCL_GRAPH_HANG_S=60 LD_PRELOAD=$CCL/libnccl.so.2 \
  timeout -s KILL 150 python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/torch_graph.py one-gpu \
  > "$L/torch_graph.log" 2>&1
echo "exit $?" >> "$L/torch_graph.log"
grep -E "PASS|FAIL|wrong elements|exit" "$L/torch_graph.log" | sed 's/^/torch_graph: /' | tee -a "$S"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
