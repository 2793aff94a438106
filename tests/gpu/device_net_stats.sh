#!/usr/bin/env bash
# Issue 6: the executor's own account (NCCL_DEBUG=INFO "executor ..." at destroy: time in
# received-frame copies, in sends, idle) for host and device memory over the network path,
# so the GPU staging's cost shows against the transport's. VARIANTS as device_net_knobs.sh.
set -uo pipefail
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/stats; mkdir -p "$L"
for v in ${VARIANTS:-"default:CCL_NET=mpt"}; do
  name=${v%%:*}; IFS=, read -ra kv <<< "${v#*:}"
  xs=(); for a in "${kv[@]}"; do xs+=(-x "${a%%=*}"); done
  for mem in ${MEMS:-host device}; do
    for op in ${OPS:-sendrecv all_reduce}; do
      log=$L/$name.$mem.$op.log
      env "${kv[@]}" LD_LIBRARY_PATH=$CCL CCL_NET=mpt NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_DEBUG=INFO \
        timeout -s KILL 60 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x CCL_NET \
        -x NCCL_SHM_DISABLE -x NCCL_P2P_DISABLE -x NCCL_DEBUG "${xs[@]}" .dev/ccl-perf $op -b ${SIZE:-128M} \
        -e ${SIZE:-128M} -n ${ITERS:-20} -w 2 -c 0 --mem $mem > "$log" 2>&1
      echo "$name $mem $op: $(grep -E '^ +[0-9]' "$log" | tail -n 1 | awk '{print $8}') GB/s"
      grep -o "rank [01]: executor.*" "$log" | sed 's/\x1b\[[0-9;]*m//g'
    done
  done
done
