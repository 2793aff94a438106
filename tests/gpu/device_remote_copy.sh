#!/usr/bin/env bash
# CCL_IPC_REMOTE_COPY=1 on the GPU machine (issue 5): the six direct ops under
# mpirun with checking (1 MiB..256 MiB) and libccl's account of the copies the peer GPU's
# engine ran; sendrecv busbw with it off and on; then overlap.py's send/receive and in-place
# all-gather beside the GEMM (NVIDIA NCCL, libccl, libccl with remote copies, in two-thread
# and one-thread modes). Needs .dev/libnccl.so.2 and .dev/ccl-perf. Writes $OUT/remote.txt and
# $OUT/overlap-remote.txt.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=$OUT/remote.txt; : > "$R"
for op in sendrecv alltoall all_gather broadcast gather scatter; do
  LD_LIBRARY_PATH=$CCL CCL_IPC_REMOTE_COPY=1 NCCL_DEBUG=INFO timeout -s KILL 60 mpirun --allow-run-as-root --bind-to none -np 2 \
    -x LD_LIBRARY_PATH -x CCL_IPC_REMOTE_COPY -x NCCL_NVLS_ENABLE -x NCCL_DEBUG .dev/ccl-perf $op -b 1M -e 256M -f 16 -n 5 -w 2 -c 1 > /tmp/r_$op.log 2>&1
  echo "### $op exit $?" >> $R
  grep -E "^ +[0-9]+ |wrong|remote cop|pushed|peer GPU" /tmp/r_$op.log | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-220 >> $R
done
for v in 0 1; do
  LD_LIBRARY_PATH=$CCL CCL_IPC_REMOTE_COPY=$v timeout -s KILL 60 mpirun --allow-run-as-root --bind-to none -np 2 \
    -x LD_LIBRARY_PATH -x CCL_IPC_REMOTE_COPY -x NCCL_NVLS_ENABLE .dev/ccl-perf sendrecv -b 128M -e 512M -f 4 -n 20 -w 5 -c 0 > /tmp/p_$v.log 2>&1
  echo "### sendrecv busbw CCL_IPC_REMOTE_COPY=$v exit $?" >> $R; grep -E "^ +[0-9]+ " /tmp/p_$v.log >> $R
done
cat $R
SKIP_BASE=1 VARIANTS="nccl:OVERLAP_ENQUEUE=threads ccl:OVERLAP_ENQUEUE=threads ccl_remote:CCL_IPC_REMOTE_COPY=1 ccl_remote_il:CCL_IPC_REMOTE_COPY=1,OVERLAP_ENQUEUE=interleave" OVERLAP_COLLS="sendrecv all_gather_inplace" bash tests/gpu/device_overlap_host.sh > /dev/null 2>&1
grep -E "^OVERLAP|^###|exit|peer GPU|remote cop|sends posted" $OUT/overlap-host.txt | cut -c1-300
mv $OUT/overlap-host.txt $OUT/overlap-remote.txt
