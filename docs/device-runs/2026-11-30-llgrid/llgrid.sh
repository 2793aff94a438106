#!/usr/bin/env bash
# The low-latency kernels' grid and acknowledgement fence against NVIDIA NCCL, 8 B - 1 MiB,
# eager and in CUDA graphs (-G 10: the GPU's time alone), two H200s, one call:
#   base  = the build's defaults (measured with 32 blocks of 512 threads, fenced acknowledgements,
#           packed lines to 16 KiB; since bd85b8b unfenced and packed to 64 KiB)
#   b4k / b16k = CCL_IPC_LL_BLOCK_BYTES=4096 / 16384 (a block per that many bytes per peer)
#   nf    = CCL_IPC_LL_ACK_FENCE=0;  b4knf = both;  t256 = b4knf with CCL_IPC_LL_THREADS=256
#   bash docs/device-runs/2026-11-30-llgrid/llgrid.sh     (carry .dev; logs in $OUT/llgrid-*.tgz)
set -uo pipefail
O=${OUT:-/tmp/out}
export ENVS_b4k=CCL_IPC_LL_BLOCK_BYTES=4096 ENVS_b16k=CCL_IPC_LL_BLOCK_BYTES=16384 \
  ENVS_nf=CCL_IPC_LL_ACK_FENCE=0 ENVS_b4knf="CCL_IPC_LL_BLOCK_BYTES=4096 CCL_IPC_LL_ACK_FENCE=0" \
  ENVS_t256="CCL_IPC_LL_BLOCK_BYTES=4096 CCL_IPC_LL_ACK_FENCE=0 CCL_IPC_LL_THREADS=256"
L=${LIB:-.dev/new}
LIBS="nccl base=$L b4k=$L b16k=$L nf=$L b4knf=$L t256=$L"
OPS=${OPS:-all_reduce broadcast all_gather reduce_scatter reduce}
for mode in eager graph; do
  g=""; [ $mode = graph ] && g="-G 10"
  OUT=$O/llgrid-$mode LIBS="$LIBS" NGPU=2 OPS="$OPS" EXTRA="-b 8 -e 1M -f 4 -n 50 -w 10 $g" \
    timeout ${LIMIT:-240} bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
  for v in ${LIBS#nccl }; do
    n=${v%%=*}
    .dev/ccl-report "$O/llgrid-$mode/nccltests" --base nccl --lib "$n" 2>/dev/null | grep -E "^\| \*\*(median|lowest)" | sed "s/^/$mode $n /"
  done
  (cd "$O" && tar czf "llgrid-$mode.tgz" "llgrid-$mode/nccltests" && rm -rf "llgrid-$mode")
done
