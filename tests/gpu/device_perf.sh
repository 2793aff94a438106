#!/usr/bin/env bash
# busbw and latency of libccl beside NVIDIA NCCL in one call, both as -g N and as mpirun -np N
# (N = NGPU, default 2). Env: NGPU, OPS, SIZES, MODES ("gN mpi": a mode starting with g is one
# process). Prints a markdown table to $OUT/perf.md.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
NGPU=${NGPU:-2}
S=$OUT/perf.md; : > "$S"
say() { echo "$*" | tee -a "$S"; }
python3 tests/gpu/perf_rows.py --header mode,op,size NCCL,libccl | tee -a "$S"
for mode in ${MODES:-g$NGPU mpi}; do
  for op in ${OPS:-sendrecv alltoall all_gather broadcast}; do
    for size in ${SIZES:-8 1M 128M 512M}; do
      for lib in nccl ccl; do
        [ $lib = nccl ] && LP=$NV || LP=$CCL
        log=$L/$mode.$op.$size.$lib.log
        if [ "${mode#g}" != "$mode" ]; then
          LD_LIBRARY_PATH=$LP timeout -s KILL 40 .dev/ccl-perf $op -b $size -e $size -n 20 -w 5 -c 0 -g $NGPU > "$log" 2>&1
        else
          LD_LIBRARY_PATH=$LP timeout -s KILL 40 mpirun --allow-run-as-root --bind-to none -np $NGPU \
            -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x CCL_IPC_PUSH_WAIT_US -x CCL_IPC_DIRECT \
            .dev/ccl-perf $op -b $size -e $size -n 20 -w 5 -c 0 > "$log" 2>&1
        fi
      done
      python3 tests/gpu/perf_rows.py "$mode,$op,$size" "$L/$mode.$op.$size.nccl.log" "$L/$mode.$op.$size.ccl.log" | tee -a "$S"
    done
  done
done
