#!/usr/bin/env bash
# Issue 6: the streamed GPU all-to-all over the network path keeps its own block on the device.
# Two (and three) ranks as processes over loopback (P2P and SHM off, mpt), GPU memory:
#  1. correctness: alltoall 2.5-67.5 MB (streamed: above the 2 MiB stream piece), four types,
#     in and out of place, checked; prints rc, rows and the #wrong total per run;
#  2. busbw at 128 and 512 MiB, three rounds: this build ("new"), this build unstreamed
#     (CCL_GPU_STREAM_PIECE_BYTES=0: one collective per 32 MiB piece, own block on the device)
#     and the build in .dev/old (its libnccl.so.2 and ccl-perf) with its defaults.
# Run from the repository root on the device with .dev carried.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt
for np in 2 3; do for d in float,int8 bfloat16,int64; do
  LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 200 mpirun --allow-run-as-root --bind-to none -np $np -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x CCL_NET -x LD_LIBRARY_PATH .dev/ccl-perf alltoall -b 2500000 -e 70000000 -f 3 -n 2 -w 1 -c 1 -d $d --mem device > "$OUT/check.$np.${d/,/-}.log" 2>&1; echo "np $np $d rc $? rows $(grep -cE '^ +[0-9]' "$OUT/check.$np.${d/,/-}.log") wrong $(grep -E '^ +[0-9]' "$OUT/check.$np.${d/,/-}.log" | awk '{w+=$9; if ($13!="N/A") w+=$13} END {print w+0}')"
done; done
for r in 1 2 3; do
  ROUNDS=1 MEMS=device OPS=alltoall RANGE="128M 512M" ARGS="-n 20 -w 3 -c 1" SETS="new: off:CCL_GPU_STREAM_PIECE_BYTES=0" bash tests/gpu/device_net_ab.sh
  CCL_DEV=$PWD/.dev/old ROUNDS=1 MEMS=device OPS=alltoall RANGE="128M 512M" ARGS="-n 20 -w 3 -c 1" SETS="old:" bash tests/gpu/device_net_ab.sh
done
rm -rf $OUT/net_ab
