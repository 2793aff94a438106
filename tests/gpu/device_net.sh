#!/usr/bin/env bash
# Issue 6, acceptance 3, in one device call: two GPUs forced through the network path
# (P2P and SHM off, two processes over loopback), NVIDIA NCCL's socket transport beside
# libccl's multipath transport (staged through pinned host memory), all_reduce, sendrecv and
# alltoall at 128 MiB with checking. Prints a table of busbw and ratios; logs under $OUT.
# Env: ENGINES (libccl CCL_MPT_ENGINES values to try, default "1 4"), PIECES
# (CCL_GPU_PIECE_BYTES values: 0 = whole, else the staged copies overlap the network in pieces
# of that many bytes; default "0 4194304"), FRAMES (CCL_SOCKET_FRAME_BYTES values, the largest frame
# on a link; default 524288), ENGINE_COPY=1 (CCL_MPT_ENGINE_COPY), SIZE (128M), HOSTMEM=1 (also libccl on host memory,
# `ccl-perf --mem host`: the transport alone, without the GPU staging), NET_CHECK=1 (then a
# correctness sweep of all nine ops, 8 B..64 MiB, through the network path with the last of
# PIECES; logs net/check.*.log), COPY_THREADS (CCL_COPY_THREADS for every libccl run: helper
# threads sharing the executor's copies of received frames; default auto), ASYNC
# (CCL_MPT_ASYNC_COPY values: 1 = deferred sends copied on the copy threads; default 0), ZERO
# (CCL_MPT_ZERO_COPY values: 1 = frames sent from the operation's memory, uncopied; default 1).
# OPS (default "all_reduce sendrecv alltoall"), CHECK_PIECES (piece sizes of the NET_CHECK sweep;
# default the last of PIECES), STREAMS (CCL_GPU_STREAM_PIECE_BYTES values: a lone all-reduce as
# one collective on piece gates of that many bytes; default auto: 2 MiB over the network).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
export CCL_COPY_THREADS=${COPY_THREADS:-auto}
# PLACE: CCL_MPT_PLACE_RECEIVES for every libccl run (1: receives written straight into their
# destination; 0: through the receive slots; auto, the default: 1 only without copy helpers).
export CCL_MPT_PLACE_RECEIVES=${PLACE:-auto}
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/net; mkdir -p "$L"
SIZE=${SIZE:-128M}
busbw() { grep -E '^ +[0-9]' "$1" | tail -n 1 | awk '{print $8, $9}'; }
printf '| op | NCCL socket GB/s | libccl mpt GB/s | engines | piece bytes | frame bytes | ratio | libccl #wrong |\n|---|---:|---:|---:|---:|---:|---:|---:|\n'
for op in ${OPS:-all_reduce sendrecv alltoall}; do
  LD_LIBRARY_PATH=$NV NCCL_NET=Socket timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 \
    -x LD_LIBRARY_PATH -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x NCCL_NET -x NCCL_NVLS_ENABLE \
    .dev/ccl-perf $op -b $SIZE -e $SIZE -n 10 -w 2 -c 1 > "$L/$op.nccl.log" 2>&1
  read -r nb nw < <(busbw "$L/$op.nccl.log")
  for e in ${ENGINES:-1 4}; do
    for p in ${PIECES:-0 4194304}; do
      for f in ${FRAMES:-auto}; do
      for a in ${ASYNC:-0}; do
      for z in ${ZERO:-1}; do
      for sp in ${STREAMS:-auto}; do
      log=$L/$op.ccl.e$e.p$p.f$f.a$a.z$z.s$sp.log
      LD_LIBRARY_PATH=$CCL CCL_NET=mpt CCL_MPT_ENGINES=$e CCL_GPU_PIECE_BYTES=$p CCL_SOCKET_FRAME_BYTES=$f \
        CCL_GPU_STREAM_PIECE_BYTES=$sp \
        CCL_MPT_ENGINE_COPY=${ENGINE_COPY:-0} CCL_MPT_ASYNC_COPY=$a CCL_MPT_ZERO_COPY=$z NCCL_DEBUG=INFO timeout -s KILL 180 \
        mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x NCCL_P2P_DISABLE -x NCCL_DEBUG \
        -x NCCL_SHM_DISABLE -x CCL_NET -x CCL_MPT_ENGINES -x CCL_GPU_PIECE_BYTES -x CCL_SOCKET_FRAME_BYTES \
        -x CCL_MPT_ENGINE_COPY -x CCL_COPY_THREADS -x CCL_MPT_PLACE_RECEIVES -x CCL_MPT_ASYNC_COPY -x CCL_MPT_ZERO_COPY \
        -x CCL_GPU_STREAM_PIECE_BYTES \
        .dev/ccl-perf $op -b $SIZE -e $SIZE -n 10 -w 2 -c 1 > "$log" 2>&1
      read -r cb cw < <(busbw "$log")
      # The executor's account of its time (printed at destroy), to $L/executor.txt.
      grep -o "rank 0: executor.*" "$log" | sed "s/^/$op e$e p$p f$f a$a z$z s$sp: /; s/\x1b\[[0-9;]*m//g" >> "$L/executor.txt"
      awk -v op=$op -v n="$nb" -v c="$cb" -v e=$e -v p=$p  -v f="$f a$a z$z s$sp" -v w="$cw" \
        'BEGIN { printf "| %s | %s | %s | %s | %s | %s | %.2f | %s |\n", op, n, c, e, p, f, (n>0?c/n:0), w }'
      done
      done
      done
      done
    done
  done
done
[ -s "$L/executor.txt" ] && { echo; cat "$L/executor.txt"; }
if [ "${HOSTMEM:-0}" = 1 ]; then
  printf '\n| op | libccl mpt, host memory GB/s | engines | #wrong |\n|---|---:|---:|---:|\n'
  for op in ${OPS:-all_reduce sendrecv alltoall}; do
    for e in ${ENGINES:-1 4}; do
      log=$L/$op.host.e$e.log
      LD_LIBRARY_PATH=$CCL CCL_NET=mpt CCL_MPT_ENGINES=$e timeout -s KILL 120 \
        mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x NCCL_P2P_DISABLE \
        -x NCCL_SHM_DISABLE -x CCL_NET -x CCL_MPT_ENGINES -x CCL_COPY_THREADS -x CCL_MPT_PLACE_RECEIVES \
        .dev/ccl-perf $op -b $SIZE -e $SIZE -n 10 -w 2 -c 1 --mem host > "$log" 2>&1
      read -r hb hw < <(busbw "$log")
      printf '| %s | %s | %s | %s |\n' $op "$hb" $e "$hw"
    done
  done
fi
if [ "${NET_CHECK:-0}" = 1 ]; then
  p=${PIECES:-0 4194304}; p=${p##* }
  for p in ${CHECK_PIECES:-$p}; do
  for op in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter; do
    log=$L/check.$op.p$p.log
    LD_LIBRARY_PATH=$CCL CCL_NET=mpt CCL_GPU_PIECE_BYTES=$p timeout -s KILL 120 \
      mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x NCCL_P2P_DISABLE \
      -x NCCL_SHM_DISABLE -x CCL_NET -x CCL_GPU_PIECE_BYTES -x CCL_COPY_THREADS -x CCL_MPT_PLACE_RECEIVES \
      .dev/ccl-perf $op -b 8 -e 64M -f 8 -n 2 -w 1 -c 1 > "$log" 2>&1
    echo "net check $op (pieces $p): exit $?, wrong $(awk '/^ +[0-9]/ {w += $9 + $13} END {print w+0}' "$log"), rows $(grep -c '^ *[0-9]' "$log")"
  done
  done
fi
