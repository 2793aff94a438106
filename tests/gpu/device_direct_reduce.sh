#!/usr/bin/env bash
# Direct all-reduce / reduce-scatter (CCL_IPC_DIRECT_REDUCE_BYTES) in one device call:
# correctness with checking (-g 2 and mpirun -np 2, float up to 512 MiB, all types x all ops
# 2..32 MiB), then busbw beside NVIDIA's NCCL and beside libccl's staged path at 8, 128 and
# 512 MiB. Writes $OUT/direct_reduce.md; logs packed into $OUT/dr_logs.tgz.
# Env: DR_BYTES (threshold, default 1: every size the low-latency kernel leaves), DR_SIZES
# (busbw sizes, default "2M 8M 128M 512M"), CCL_IPC_DIRECT_REDUCE_PIECE_BYTES, SKIP_CHECK=1,
# SKIP_PERF=1.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/dr_logs; mkdir -p "$L"
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
S=$OUT/direct_reduce.md; : > "$S"
say() { echo "$*" | tee -a "$S"; }
DR=${DR_BYTES:-1}
# Pieces a direct all-reduce slice is reduced and pushed in (libccl default 16 MiB).
export CCL_IPC_DIRECT_REDUCE_PIECE_BYTES=${CCL_IPC_DIRECT_REDUCE_PIECE_BYTES:-16777216}
wrong() { awk '/^ +[0-9]/ {w += $9 + $13} END {print w+0}' "$1"; }
if [ "${SKIP_CHECK:-0}" != 1 ]; then
  for op in all_reduce reduce_scatter; do
    for args in "-b 8 -e 512M -f 8 -n 2 -w 1 -c 1" "-b 2M -e 32M -f 4 -n 1 -w 1 -c 1 -d all -o all"; do
      tag=$(echo "$args" | tr -dc 'a-z0-9' | cut -c1-12)
      CCL_IPC_DIRECT_REDUCE_BYTES=$DR LD_LIBRARY_PATH=$CCL timeout -s KILL 90 .dev/ccl-perf $op $args -g 2 > "$L/g2.$op.$tag.log" 2>&1
      say "check g2 $op ($args): exit $?, rows $(grep -c '^ *[0-9]' "$L/g2.$op.$tag.log"), wrong $(wrong "$L/g2.$op.$tag.log")"
      CCL_IPC_DIRECT_REDUCE_BYTES=$DR LD_LIBRARY_PATH=$CCL timeout -s KILL 90 mpirun --allow-run-as-root --bind-to none -np 2 \
        -x LD_LIBRARY_PATH -x CCL_IPC_DIRECT_REDUCE_BYTES -x CCL_IPC_DIRECT_REDUCE_PIECE_BYTES -x NCCL_DEBUG .dev/ccl-perf $op $args > "$L/mpi.$op.$tag.log" 2>&1
      say "check mpi $op ($args): exit $?, rows $(grep -c '^ *[0-9]' "$L/mpi.$op.$tag.log"), wrong $(wrong "$L/mpi.$op.$tag.log")"
    done
  done
fi
if [ "${SKIP_PERF:-0}" != 1 ]; then
  python3 tests/gpu/perf_rows.py --header mode,op,size NCCL,direct,staged | tee -a "$S"
  for mode in g2 mpi; do
    for op in all_reduce reduce_scatter; do
      for size in ${DR_SIZES:-2M 8M 128M 512M}; do
        for lib in nccl direct staged; do
          [ $lib = nccl ] && LP=$NV || LP=$CCL
          [ $lib = direct ] && B=$DR || B=0
          log=$L/perf.$mode.$op.$size.$lib.log
          if [ $mode = g2 ]; then
            CCL_IPC_DIRECT_REDUCE_BYTES=$B LD_LIBRARY_PATH=$LP timeout -s KILL 40 .dev/ccl-perf $op -b $size -e $size -n 20 -w 5 -c 0 -g 2 > "$log" 2>&1
          else
            CCL_IPC_DIRECT_REDUCE_BYTES=$B LD_LIBRARY_PATH=$LP timeout -s KILL 40 mpirun --allow-run-as-root --bind-to none -np 2 \
              -x LD_LIBRARY_PATH -x CCL_IPC_DIRECT_REDUCE_BYTES -x CCL_IPC_DIRECT_REDUCE_PIECE_BYTES -x NCCL_NVLS_ENABLE .dev/ccl-perf $op -b $size -e $size -n 20 -w 5 -c 0 > "$log" 2>&1
          fi
        done
        python3 tests/gpu/perf_rows.py "$mode,$op,$size" "$L/perf.$mode.$op.$size".{nccl,direct,staged}.log | tee -a "$S"
      done
    done
  done
fi
cd "$OUT" && tar czf dr_logs.tgz dr_logs && rm -rf dr_logs
