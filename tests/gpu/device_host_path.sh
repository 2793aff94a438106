#!/usr/bin/env bash
# The host path (a share of each large direct transfer through pinned host memory over PCIe
# beside NVLink, CCL_IPC_HOST_PATH_*) against NVIDIA NCCL and against itself off, in one call.
# Every libccl run checks its results (-c 1; NCCL's runs -c 0). Env: OPS, SIZES, MODES
# ("g2 mpi"), VARIANTS: space-separated "label:P1/M1/P2/M2" = one-way permille / min bytes /
# exchange permille / min bytes (default "off:0/0/0/0 dflt:100/64M/70/128M").
# Prints a markdown table to $OUT/host_path.md: NCCL first, then libccl per variant.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
S=$OUT/host_path.md; : > "$S"; : > "$OUT/host_path_notes.txt"
VARIANTS=${VARIANTS:-off:0/0/0/0 dflt:100/64M/70/128M}
names=NCCL; for v in $VARIANTS; do names="$names,${v%%:*}"; done
python3 tests/gpu/perf_rows.py --header mode,op,size "$names" | tee -a "$S"
bytes() { numfmt --from=iec "$1"; }
run() { # mode op size libpath check log [env...]
  local mode=$1 op=$2 size=$3 lp=$4 check=$5 log=$6; shift 6
  if [ "$mode" = g2 ]; then
    env "$@" LD_LIBRARY_PATH=$lp timeout -s KILL 60 .dev/ccl-perf $op -b $size -e $size -n 20 -w 5 -c $check -g 2 > "$log" 2>&1
  else
    env "$@" LD_LIBRARY_PATH=$lp timeout -s KILL 60 mpirun --allow-run-as-root --bind-to none -np 2 \
      -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x NCCL_DEBUG -x CCL_IPC_HOST_PATH_PERMILLE \
      -x CCL_IPC_HOST_PATH_MIN_BYTES -x CCL_IPC_HOST_PATH_EXCHANGE_PERMILLE -x CCL_IPC_HOST_PATH_EXCHANGE_MIN_BYTES \
      .dev/ccl-perf $op -b $size -e $size -n 20 -w 5 -c $check > "$log" 2>&1
  fi
}
for mode in ${MODES:-g2 mpi}; do
  for op in ${OPS:-sendrecv broadcast all_gather alltoall}; do
    for size in ${SIZES:-64M 128M 512M}; do
      base=$L/$mode.$op.$size
      run $mode $op $size $NV 0 $base.nccl.log NCCL_DEBUG=WARN
      logs=""
      for v in $VARIANTS; do
        label=${v%%:*}; IFS=/ read -r p1 m1 p2 m2 <<< "${v#*:}"
        run $mode $op $size $CCL 1 $base.$label.log NCCL_DEBUG=INFO \
          CCL_IPC_HOST_PATH_PERMILLE=$p1 CCL_IPC_HOST_PATH_MIN_BYTES=$(bytes $m1) \
          CCL_IPC_HOST_PATH_EXCHANGE_PERMILLE=$p2 CCL_IPC_HOST_PATH_EXCHANGE_MIN_BYTES=$(bytes $m2)
        logs="$logs $base.$label.log"
        grep -h -E "Out of bounds|through the host path|rror" $base.$label.log | grep -v "rank 1:" \
          | sed -E "s/^.*(rank 0: cuda-ipc sent [0-9]+ bytes).*( [0-9]+ through the host path).*/\1,\2/; s/^/[$mode $op $size $label] /" >> "$OUT/host_path_notes.txt"
      done
      python3 tests/gpu/perf_rows.py "$mode,$op,$size" $base.nccl.log $logs | tee -a "$S"
    done
  done
done
echo; grep -v "0 OK" "$OUT/host_path_notes.txt" | head -60
echo "checks: $(grep -c '0 OK' "$OUT/host_path_notes.txt") OK of $(grep -c 'Out of bounds' "$OUT/host_path_notes.txt")"
