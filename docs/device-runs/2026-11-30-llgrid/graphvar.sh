#!/usr/bin/env bash
# The low-latency kernels' settings measured on the GPU's time alone (nccl-tests -G 10, small
# collectives captured as those kernels), 1 KiB - 1 MiB, two H200s, one call:
#   ll = the build's defaults (measured: packed to 16 KiB, fenced; bd85b8b made pk64nf the defaults); pk64 = CCL_IPC_LL_PACK_BYTES=65536; nf = CCL_IPC_LL_ACK_FENCE=0;
#   b8k = CCL_IPC_LL_BLOCK_BYTES=8192; pk64nf = pk64 + nf; t256 = CCL_IPC_LL_THREADS=256
#   bash docs/device-runs/2026-11-30-llgrid/graphvar.sh   (carry .dev; logs in $OUT/graphvar.tgz)
set -uo pipefail
O=${OUT:-/tmp/out}
L=${LIB:-.dev/new}
export ENVS_pk64=CCL_IPC_LL_PACK_BYTES=65536 ENVS_nf=CCL_IPC_LL_ACK_FENCE=0 \
  ENVS_b8k=CCL_IPC_LL_BLOCK_BYTES=8192 ENVS_pk64nf="CCL_IPC_LL_PACK_BYTES=65536 CCL_IPC_LL_ACK_FENCE=0" \
  ENVS_t256=CCL_IPC_LL_THREADS=256
LIBS="nccl ll=$L pk64=$L nf=$L b8k=$L pk64nf=$L t256=$L"
OUT=$O/graphvar LIBS="$LIBS" NGPU=2 OPS="${OPS:-all_reduce broadcast reduce all_gather reduce_scatter alltoall}" \
  EXTRA="-b 1K -e 1M -f 2 -n 50 -w 10 -G 10" timeout ${LIMIT:-300} bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
for v in ${LIBS#nccl }; do
  n=${v%%=*}
  .dev/ccl-report "$O/graphvar/nccltests" --base nccl --lib "$n" 2>/dev/null | grep -E "^\| (size|\*\*median|\*\*lowest)|wrong" | sed "s/^/$n /"
done
(cd "$O" && tar czf graphvar.tgz graphvar/nccltests && rm -rf graphvar)
