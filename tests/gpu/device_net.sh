#!/usr/bin/env bash
# Issue 6, acceptance 3, in one device call: two GPUs forced through the network path
# (P2P and SHM off, two processes over loopback), NVIDIA NCCL's socket transport beside
# libccl's multipath transport (staged through pinned host memory), all_reduce, sendrecv and
# alltoall at 128 MiB with checking. Prints a table of busbw and ratios; logs under $OUT.
# Env: ENGINES (libccl CCL_MPT_ENGINES values to try, default "1 4"), SIZE (128M).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/net; mkdir -p "$L"
SIZE=${SIZE:-128M}
busbw() { grep -E '^ +[0-9]' "$1" | tail -n 1 | awk '{print $8, $9}'; }
printf '| op | NCCL socket GB/s | libccl mpt GB/s (engines) | ratio | libccl #wrong |\n|---|---:|---:|---:|---:|\n'
for op in all_reduce sendrecv alltoall; do
  LD_LIBRARY_PATH=$NV NCCL_NET=Socket timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 \
    -x LD_LIBRARY_PATH -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x NCCL_NET -x NCCL_NVLS_ENABLE \
    .dev/ccl-perf $op -b $SIZE -e $SIZE -n 10 -w 2 -c 1 > "$L/$op.nccl.log" 2>&1
  read -r nb nw < <(busbw "$L/$op.nccl.log")
  for e in ${ENGINES:-1 4}; do
    LD_LIBRARY_PATH=$CCL CCL_NET=mpt CCL_MPT_ENGINES=$e timeout -s KILL 180 mpirun --allow-run-as-root \
      --bind-to none -np 2 -x LD_LIBRARY_PATH -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x CCL_NET \
      -x CCL_MPT_ENGINES .dev/ccl-perf $op -b $SIZE -e $SIZE -n 10 -w 2 -c 1 > "$L/$op.ccl.e$e.log" 2>&1
    read -r cb cw < <(busbw "$L/$op.ccl.e$e.log")
    awk -v op=$op -v n="$nb" -v c="$cb" -v e=$e -v w="$cw" 'BEGIN { printf "| %s | %s | %s (%s) | %.2f | %s |\n", op, n, c, e, (n>0?c/n:0), w }'
  done
done
