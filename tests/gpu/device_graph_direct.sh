#!/usr/bin/env bash
# Captured collectives between ranks on the direct paths (libccl/src/cuda_ipc/captured.rs)
# against the staged captured path (CCL_GRAPH_DIRECT=0), eager calls (-G 0) and, with two or
# more GPUs, NVIDIA NCCL's captured kernels: ccl-perf -G (each size's timed iterations
# captured once, the graph launched G times), checked. With NGPU >= 2 one rank per GPU
# (mpirun); on one GPU, two ranks in one process (-g 2, one context: no time slicing between
# processes; PER=3 or 4: that many). Prints the rows; logs under $OUT/graph_direct.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
CCL=${CCL:-$PWD/.dev}; NGPU=${NGPU:-$(nvidia-smi -L | wc -l)}; L=${OUT:-/tmp/out}/graph_direct; mkdir -p "$L"
G=${G:-10}; OPS=${OPS:-all_reduce all_gather reduce_scatter sendrecv broadcast}
ARGS="-b 8 -e ${MAX:-64M} -f ${STEP:-8} -n ${ITERS:-20} -w 2 -c 1"
if [ "$NGPU" -ge 2 ]; then NP=$NGPU; PER=1; else NP=1; PER=${PER:-2}; fi
one() { local tag=$1 lp=$2 graph=$3 direct=$4 op=$5
  echo "== $op $tag (-G $graph, CCL_GRAPH_DIRECT=$direct, $NP processes x $PER ranks)"
  CCL_GRAPH_DIRECT=$direct LD_LIBRARY_PATH=$lp timeout -s KILL 150 mpirun --allow-run-as-root --bind-to none -np $NP \
    -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x CCL_GRAPH_DIRECT -x NCCL_DEBUG $CCL/ccl-perf $op -g $PER $ARGS -G $graph \
    > "$L/$op.$tag.log" 2>&1; echo "exit $?"
  grep -E "^ +[0-9]|rror|wrong" "$L/$op.$tag.log" | head -12; }
for op in $OPS; do
  [ "$NGPU" -ge 2 ] && one nccl_graph $NV $G 1 $op
  one ccl_graph_direct $CCL $G 1 $op
  one ccl_graph_staged $CCL $G 0 $op
  one ccl_eager $CCL 0 1 $op
done
