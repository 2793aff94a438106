#!/usr/bin/env bash
# Issue 6: a reduce-scatter (OP=reduce_scatter, the default), reduce, broadcast, gather or scatter
# (every root), or all-gather (OP=all_gather) of GPU buffers over the network path streamed on
# piece gates.
# Two (and three) ranks as processes over loopback (P2P and SHM off, mpt), GPU memory:
#  1. correctness: 3-48 MB (streamed above the 2 MiB stream piece), five types x
#     sum / prod / max / min, and avg / premulsum (not streamed), in and out of place, checked;
#     prints rc, rows and the #wrong total per run;
#  2. busbw at 32, 128 and 512 MiB (RANGE, FACTOR), ROUNDS (3) rounds (none with
#     CHECK_ONLY=1): streamed (the default), unstreamed (CCL_GPU_STREAM_PIECE_BYTES=0: the
#     whole input down, one collective, the output up; a broadcast or reduce in pieces of
#     CCL_GPU_PIECE_BYTES, each its own collective; an all-gather in such pieces per block)
#     and host memory.
# All but the reduce-scatter and reduce run their check with sum only (they reduce nothing).
# Run from the repository root on the device with .dev carried.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt
check() { # name np ccl-perf args...
  local name=$1 np=$2; shift 2
  LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 240 mpirun --allow-run-as-root --bind-to none -np "$np" \
    -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x CCL_NET -x LD_LIBRARY_PATH .dev/ccl-perf "${OP:-reduce_scatter}" "$@" \
    --mem device > "$OUT/check.$name.log" 2>&1
  echo "$name rc $? rows $(grep -cE '^ +[0-9]' "$OUT/check.$name.log") wrong $(grep -E '^ +[0-9]' "$OUT/check.$name.log" | awk '{w+=$9; if ($13!="N/A") w+=$13} END {print w+0}')"
}
REDOPS=sum,prod,max,min; ROOTS=()
case "${OP:-reduce_scatter}" in
  all_gather) REDOPS=sum ;;
  gather|scatter|broadcast) REDOPS=sum ROOTS=(-r all) ;;
  reduce) ROOTS=(-r all) ;;
esac
for np in 2 3; do
  check "np$np" $np -b 3000000 -e 70000000 -f 4 -n 2 -w 1 -c 1 -d float,bfloat16,int32,int8,double -o "$REDOPS" "${ROOTS[@]}"
  [[ "${OP:-reduce_scatter}" == reduce* ]] || continue
  check "np$np-avg" $np -b 3000000 -e 70000000 -f 4 -n 2 -w 1 -c 1 -d float,half -o avg,premulsum "${ROOTS[@]}"
done
[ "${CHECK_ONLY:-0}" = 1 ] && exit 0
for r in $(seq "${ROUNDS:-3}"); do
  ROUNDS=1 MEMS=device OPS="${OP:-reduce_scatter}" RANGE="${RANGE:-32M 512M}" FACTOR="${FACTOR:-4}" ARGS="-n 20 -w 3 -c 1" SETS="stream: whole:CCL_GPU_STREAM_PIECE_BYTES=0" bash tests/gpu/device_net_ab.sh
  ROUNDS=1 MEMS=host OPS="${OP:-reduce_scatter}" RANGE="${RANGE:-32M 512M}" FACTOR="${FACTOR:-4}" ARGS="-n 20 -w 3 -c 1" bash tests/gpu/device_net_ab.sh
done
rm -rf "$OUT/net_ab"
