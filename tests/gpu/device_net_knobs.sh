#!/usr/bin/env bash
# Issue 6: the network path's copies (executor thread) against the knobs that spread them:
# CCL_COPY_THREADS / CCL_COPY_PARALLEL_BYTES (helpers share each received frame's copy and
# each sent frame's copy into its slot) and CCL_MPT_ENGINE_COPY (engine threads copy their own
# part of a sent frame). Two processes over loopback, P2P and SHM off, 128 MiB, libccl mpt
# only (NVIDIA NCCL's socket transport: tests/gpu/device_net.sh). VARIANTS: "name:ENV=V,ENV=V ..."
set -uo pipefail
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/knobs; mkdir -p "$L"
VARIANTS=${VARIANTS:-"e4f4m:CCL_MPT_ENGINES=4,CCL_SOCKET_FRAME_BYTES=4194304"}
printf '| variant | mem | op | busbw GB/s | #wrong |\n|---|---|---|---:|---:|\n'
for v in $VARIANTS; do
  name=${v%%:*}; envs=${v#*:}; IFS=, read -ra kv <<< "$envs"
  xs=(); for a in "${kv[@]}"; do xs+=(-x "${a%%=*}"); done
  for mem in ${MEMS:-host device}; do
    for op in ${OPS:-sendrecv all_reduce}; do
      log=$L/$name.$mem.$op.log
      env "${kv[@]}" LD_LIBRARY_PATH=$CCL CCL_NET=mpt NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 \
        timeout -s KILL 60 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x CCL_NET \
        -x NCCL_SHM_DISABLE -x NCCL_P2P_DISABLE "${xs[@]}" .dev/ccl-perf $op -b ${SIZE:-128M} -e ${SIZE:-128M} \
        -n ${ITERS:-20} -w 2 -c 1 --mem $mem > "$log" 2>&1
      printf '| %s | %s | %s | %s |\n' "$name" $mem $op \
        "$(grep -E '^ +[0-9]' "$log" | tail -n 1 | awk '{print $8, "|", $9}')"
    done
  done
done
