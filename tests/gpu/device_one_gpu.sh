#!/usr/bin/env bash
# The GPU path's regression round on a machine with ONE GPU (nvidia-h100-x1 / nvidia-h200),
# every rank on GPU 0: libccl allows that (NVIDIA's NCCL refuses it), so nothing here is
# compared with NCCL -- device_round.sh does that on two GPUs. Checks: the CUDA backend's unit
# tests (.dev/gpu_backend_test, if built), two_comms.c (two threads x two communicator sets,
# RUNS short runs and one of 10,000 iterations), peer_dies.c, abort_recovers.c, mismatch.c, group_vs_lone.c
# (staged, network transport), reuse.c (plain and
# VMM), group_comm_order.c (two communicators in a group, staged and cuda-ipc, and staged
# against one-by-one calls), the nine ops at -g 2, 3 and 4 in one process and seven under mpirun -np 2, all with
# result checks, and torch_graph.py (two processes, captured and replayed). Everything under
# $OUT; summary.md at the end, every log in one_gpu_logs.tgz. Env: RUNS (default 10).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 ONE_GPU=1
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"
S=$OUT/summary.md; : > "$S"
RUNS=${RUNS:-10}
say() { echo "$*" | tee -a "$S"; }
build() {  # build NAME [compiler]
  ${2:-gcc} -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include "tests/gpu/$1.c" -L "$CCL" \
    -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
    -lcudart -lpthread -o "/tmp/$1" >> "$L/build.log" 2>&1 || say "$1: build failed"
}

if [ -x .dev/gpu_backend_test ]; then
  timeout -s KILL 180 .dev/gpu_backend_test --test-threads=1 > "$L/gpu_backend_test.log" 2>&1
  say "gpu_backend_test: $(grep -E 'test result' "$L/gpu_backend_test.log" || echo "exit $?")"
fi

build two_comms
if [ -x /tmp/two_comms ]; then
  hung=0; failed=0
  for k in $(seq 1 "$RUNS"); do
    TWO_COMMS_ONE_GPU=1 TWO_COMMS_TIMEOUT_S=30 timeout -s KILL 40 /tmp/two_comms 200 > "$L/two_comms_$k.log" 2>&1
    rc=$?
    grep -q "watchdog fired" "$L/two_comms_$k.log" && hung=$((hung + 1))
    [ $rc -ne 0 ] && failed=$((failed + 1))
    [ $rc -eq 0 ] && rm -f "$L/two_comms_$k.log"  # failed runs' logs are kept
  done
  say "two_comms one GPU, 200 iterations: $RUNS runs, $failed failed ($hung by the watchdog)"
  TWO_COMMS_ONE_GPU=1 TWO_COMMS_TIMEOUT_S=120 timeout -s KILL 130 /tmp/two_comms 10000 > "$L/two_comms_long.log" 2>&1
  echo "exit $?" >> "$L/two_comms_long.log"
  grep -E "PASS|FAIL|exit" "$L/two_comms_long.log" | sed 's/^/two_comms 10000: /' | tee -a "$S"
fi

build peer_dies && timeout -s KILL 60 /tmp/peer_dies 2>&1 | tail -n 3 | tee -a "$S"
build abort_recovers && { timeout -s KILL 60 /tmp/abort_recovers 2>&1 | grep -a abort_recovers | tee -a "$S"; }
# The same with the pending operation on the low-latency kernels, which spin on the GPU: an
# all-reduce of 64 KiB and an all-gather of 16 KiB per rank.
for v in "ABORT_COUNT=16384" "ABORT_OP=all_gather ABORT_COUNT=4096"; do
  echo "$v:" | tee -a "$S"; env $v timeout -s KILL 60 /tmp/abort_recovers 2>&1 | grep -a abort_recovers | tee -a "$S"
done
build mismatch && timeout -s KILL 60 /tmp/mismatch 2>&1 | tail -n 3 | tee -a "$S"
# The staged path over the network transport: a large all-reduce / all-to-all called alone by
# one rank and in a group by the other.
build group_vs_lone && NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt timeout -s KILL 120 \
  /tmp/group_vs_lone 2>&1 | tail -n 2 | tee -a "$S"
build reuse mpicc
M="mpirun --allow-run-as-root --bind-to none"
if [ -x /tmp/reuse ]; then
  NCCL_DEBUG=INFO timeout -s KILL 90 $M -np 2 -x NCCL_DEBUG -x ONE_GPU /tmp/reuse > "$L/reuse.log" 2>&1
  grep -E "PASS|FAIL" "$L/reuse.log" | sed 's/^/plain: /' | tee -a "$S"
  NCCL_CUMEM_ENABLE=1 NCCL_DEBUG=INFO timeout -s KILL 90 $M -np 2 -x NCCL_DEBUG -x ONE_GPU \
    -x NCCL_CUMEM_ENABLE /tmp/reuse > "$L/reuse_vmm.log" 2>&1
  grep -E "PASS|FAIL" "$L/reuse_vmm.log" | sed 's/^/VMM: /' | tee -a "$S"
fi
# Two communicators in one group on one stream, their handles in opposite orders on the two
# ranks: staged and on cuda-ipc (the library used to queue them in address order and hang);
# staged with rank 1 calling the collectives one by one (each communicator's part of the
# group on a stream of its own, as NCCL runs them; cuda-ipc calls that a mismatch).
build group_comm_order mpicc
if [ -x /tmp/group_comm_order ]; then
  for mode in ipc staged staged-mixed; do
    x=""
    case $mode in
      staged) x="-x CCL_IPC_DISABLE=1" ;;
      staged-mixed) x="-x CCL_IPC_DISABLE=1 -x GROUP_ORDER_MIXED=1" ;;
    esac
    timeout -s KILL 90 $M -np 2 -x ONE_GPU $x /tmp/group_comm_order > "$L/group_comm_order_$mode.log" 2>&1
    grep -E "PASS|FAIL" "$L/group_comm_order_$mode.log" | head -n 3 | sed "s/^/$mode: /" | tee -a "$S"
  done
fi

# ccl-perf sets CUDA_DEVICE_MAX_CONNECTIONS=32 for -g N (ranks sharing a GPU share its queues).
P="$M -np 1 -x LD_LIBRARY_PATH .dev/ccl-perf"
export LD_LIBRARY_PATH=$CCL
sweep() {  # sweep LABEL TIMEOUT ARGS...: one ccl-perf run; its rows, wrong count and exit
  local label=$1 t=$2; shift 2
  timeout -s KILL "$t" "$@" > "$L/$label.log" 2>&1
  local rc=$?
  local rows wrong
  rows=$(grep -cE '^ +[0-9]' "$L/$label.log")
  wrong=$(grep -E '^ +[0-9]' "$L/$label.log" | awk '{w += $9; if ($13 ~ /^[0-9]+$/) w += $13} END {print w + 0}')
  say "$label: exit $rc, $rows rows, $wrong wrong"
}
for g in 2 3 4; do
  for op in all_reduce reduce_scatter reduce; do
    sweep "g$g-$op" 120 $P $op -b 8 -e 16M -f 16 -n 3 -w 1 -c 1 -g $g -d float,bfloat16,int32 -o sum,max,avg -r all
  done
  for op in all_gather broadcast alltoall sendrecv gather scatter; do
    sweep "g$g-$op" 120 $P $op -b 8 -e 16M -f 16 -n 3 -w 1 -c 1 -g $g -d float,int8 -r all
  done
done
for op in all_reduce all_gather reduce_scatter broadcast alltoall sendrecv reduce; do
  sweep "mpi2-$op" 90 $M -np 2 -x LD_LIBRARY_PATH -x ONE_GPU .dev/ccl-perf $op -b 8 -e 16M -f 16 -n 3 -w 1 -c 1
done
sweep "g2-graph-all_reduce" 90 $P all_reduce -b 8 -e 4M -f 8 -n 3 -w 1 -c 1 -g 2 -G 2

if python3 -c "import torch" 2>/dev/null; then
  CCL_GRAPH_ONE_GPU=1 CCL_GRAPH_AHEAD=64 CCL_GRAPH_HANG_S=60 LD_PRELOAD=$CCL/libnccl.so.2 \
    timeout -s KILL 150 python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/torch_graph.py one-gpu \
    > "$L/torch_graph.log" 2>&1
  echo "exit $?" >> "$L/torch_graph.log"
  grep -E "PASS|FAIL|wrong elements|exit" "$L/torch_graph.log" | sed 's/^/torch_graph: /' | tee -a "$S"
fi
# One file for the device call's fetch (it returns a handful of files).
tar czf "$OUT/one_gpu_logs.tgz" -C "$OUT" logs 2>/dev/null
echo "== summary"; cat "$S"
