#!/usr/bin/env bash
# A rank's direct copies as one cuMemcpyBatchAsync (CCL_IPC_BATCH_COPIES, default 1) against a
# copy lane per peer (=0), ranks as processes on one GPU under MPS: the backend's batch test,
# eager and captured us per call (tests/gpu/graph_nodes.c), and NVIDIA's nccl-tests with
# checking. PART=1: backend test, graph_nodes, nccl-tests of the copy collectives with four
# ranks; PART=2: the other ops with four ranks, the copy collectives with eight; PART=3: host
# time per call (-C 1); PART=4: the reductions, lanes against batch (branch batch-reduce).
set -uo pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PART=${PART:-1}
export ENVS_lanes="CCL_IPC_BATCH_COPIES=0"
summary() {  # name: busbw per size, wrong counts, for every log of a run
  for f in "$OUT"/$1/nccltests/*.log; do
    echo "$(basename "$f"): wrong $(grep -aE '^ +[0-9]+ +[0-9]+ ' "$f" | awk '{w+=$9+$13} END {print w+0}')" \
      "| $(grep -aE '^ +[0-9]+ +[0-9]+ ' "$f" | awk '{printf "%s:%s/%s ", $1, $6, $8}')"
    grep -aiE "error|abort|segfault" "$f" | head -n 3
  done
}
if [ "$PART" = 1 ]; then
  timeout -s KILL 120 .dev/gpu_backend_test --test-threads=1 a_batch_of_copies 2>&1 | grep -E "test |result"
  SETTINGS="lanes=CCL_IPC_BATCH_COPIES=0 batch=" RANKS="4 8" OPS="all_gather alltoall" \
    COUNTS="262144 4194304" bash docs/device-runs/2026-11-29-onegpu/graph_nodes.sh
  MPS=1; source tests/gpu/mps.sh
  OUT=$OUT/p1 NGPU=4 NCCL_TESTS_DEVICE=0 LIBS="lanes=.dev batch=.dev" EXTRA="-e 64M" \
    OPS="all_gather alltoall gather scatter" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
  summary p1
elif [ "$PART" = 2 ]; then
  MPS=1; source tests/gpu/mps.sh
  OUT=$OUT/p2 NGPU=4 NCCL_TESTS_DEVICE=0 LIBS="batch=.dev" EXTRA="-e 64M" \
    OPS="broadcast sendrecv all_reduce reduce_scatter reduce" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
  summary p2
  OUT=$OUT/p8 NGPU=8 NCCL_TESTS_DEVICE=0 LIBS="lanes=.dev batch=.dev" EXTRA="-e 16M" \
    OPS="all_gather alltoall" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
  summary p8
elif [ "$PART" = 4 ]; then
  # The direct reductions' pushes batched too (branch batch-reduce built into .dev).
  MPS=1; source tests/gpu/mps.sh
  OUT=$OUT/p4 NGPU=4 NCCL_TESTS_DEVICE=0 REPS=2 LIBS="lanes=.dev batch=.dev" EXTRA="-b 4M -e 64M -f 2" \
    OPS="all_reduce reduce_scatter reduce" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
  summary p4
else
  OUT=$OUT/p3 MPS=1 NGPU=4 NCCL_TESTS_DEVICE=0 LIBS="lanes=.dev batch=.dev" SIZES="1M 16M" \
    OPS="all_gather alltoall" bash tests/gpu/device_host_cost.sh 2>&1 | grep -vE "^\s*$" | head -n 60
fi
