#!/usr/bin/env bash
# ccl-perf -G (nccl-tests' CUDA graph mode: each size's timed iterations captured once, the
# graph launched G times), checked: NVIDIA NCCL and libccl, NGPU ranks (mpirun); with
# ONE_GPU=1 also libccl with two ranks on GPU 0. Prints busbw rows; logs under $OUT/graph_perf.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 CCL_GRAPH_DIRECT=${CCL_GRAPH_DIRECT:-1}
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
CCL=${CCL:-$PWD/.dev}; NGPU=${NGPU:-$(nvidia-smi -L | wc -l)}; L=${OUT:-/tmp/out}/graph_perf; mkdir -p "$L"
G=${G:-10}; OPS=${OPS:-all_reduce sendrecv all_gather}
for op in $OPS; do
  for lib in nccl ccl; do
    [ $lib = nccl ] && LP=$NV || LP=$CCL
    echo "== $op $lib $NGPU ranks -G $G"
    LD_LIBRARY_PATH=$LP timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np $NGPU -x LD_LIBRARY_PATH \
      -x NCCL_NVLS_ENABLE .dev/ccl-perf $op -b 8 -e ${MAX:-64M} -f 64 -n 10 -w 2 -G $G -c 1 > "$L/$op.$lib.log" 2>&1
    grep -E "^ +[0-9]|rror" "$L/$op.$lib.log" | head -8
  done
  if [ "${ONE_GPU:-0}" = 1 ]; then
    echo "== $op ccl 2 ranks on GPU 0 -G $G"
    CUDA_VISIBLE_DEVICES=0 LD_LIBRARY_PATH=$CCL timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 \
      -x LD_LIBRARY_PATH -x CUDA_VISIBLE_DEVICES -x CCL_GRAPH_DIRECT .dev/ccl-perf $op -b 8 -e ${MAX:-64M} -f 64 -n 10 -w 2 -G $G -c 1 \
      > "$L/$op.ccl_one_gpu.log" 2>&1
    grep -E "^ +[0-9]|rror" "$L/$op.ccl_one_gpu.log" | head -8
  fi
done
