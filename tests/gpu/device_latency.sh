#!/usr/bin/env bash
# 8-byte latency of the issue-5 ops at steady state (-n 2000 -w 200: the 20-iteration rows of
# device_round.sh move by 2x from call to call), NVIDIA NCCL beside libccl (default: small
# operations as one kernel) and libccl zero-SM (CCL_IPC_LL_EXCHANGE_BYTES=0: copy engines and
# stream flags only), as -g 2 and under mpirun. Writes $OUT/latency.md.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/lat; mkdir -p "$L"
S=$OUT/latency.md; : > "$S"
ARGS="-b 8 -e 8 -n ${LAT_ITERS:-2000} -w ${LAT_WARMUP:-200} -c 0"
python3 tests/gpu/perf_rows.py --header mode,op NCCL,libccl,zero-SM | tee -a "$S"
for mode in g2 mpi; do
  for op in ${OPS:-sendrecv alltoall all_gather broadcast gather scatter}; do
    for v in nccl ccl zsm; do
      [ $v = nccl ] && LP=$NV || LP=$CCL
      [ $v = zsm ] && LLX=0 || LLX=4096
      if [ $mode = g2 ]; then
        CCL_IPC_LL_EXCHANGE_BYTES=$LLX LD_LIBRARY_PATH=$LP timeout -s KILL 60 .dev/ccl-perf $op $ARGS -g 2 > $L/$mode.$op.$v.log 2>&1
      else
        CCL_IPC_LL_EXCHANGE_BYTES=$LLX LD_LIBRARY_PATH=$LP timeout -s KILL 60 mpirun --allow-run-as-root --bind-to none -np 2 \
          -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x CCL_IPC_LL_EXCHANGE_BYTES .dev/ccl-perf $op $ARGS > $L/$mode.$op.$v.log 2>&1
      fi
    done
    python3 tests/gpu/perf_rows.py "$mode,$op" $L/$mode.$op.{nccl,ccl,zsm}.log | tee -a "$S"
  done
done
