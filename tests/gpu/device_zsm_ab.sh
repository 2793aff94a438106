#!/usr/bin/env bash
# Issue 5's zero-SM 8-byte latency, two builds alternated: `.dev` (A) and $CCL_B (B), ROUNDS
# times each (A B, then B A, ...), NVIDIA NCCL once, `ccl-perf OP -b 8 -e 8 -n ITERS -c 0` with
# CCL_IPC_LL_EXCHANGE_BYTES=0, as -g 2 and under mpirun -np 2. Prints per op and mode the
# median of each build's rounds and NCCL's time, in us. Needs .dev/ccl-perf, .dev/libnccl.so.2
# and $CCL_B/libnccl.so.2 carried.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
export NCCL_NVLS_ENABLE=0 CCL_IPC_LL_EXCHANGE_BYTES=0
OUT=${OUT:-/tmp/zsm-ab}; mkdir -p "$OUT"
NV=${NV:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}
A=$PWD/.dev; B=$PWD/${CCL_B:?CCL_B names the second build\'s folder}
ROUNDS=${ROUNDS:-3}; ITERS=${ITERS:-1000}
OPS=${OPS:-"sendrecv alltoall all_gather broadcast gather scatter"}
one() { # lib-dir op mode -> us
  local lp=$1 op=$2 mode=$3 log=$OUT/$op.$mode.$RANDOM.log
  if [[ $mode == g2 ]]; then
    LD_LIBRARY_PATH=$lp timeout -s KILL 40 .dev/ccl-perf "$op" -b 8 -e 8 -n "$ITERS" -w 50 -c 0 -g 2 >"$log" 2>&1
  else
    LD_LIBRARY_PATH=$lp timeout -s KILL 40 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH \
      -x NCCL_NVLS_ENABLE -x CCL_IPC_LL_EXCHANGE_BYTES .dev/ccl-perf "$op" -b 8 -e 8 -n "$ITERS" -w 50 -c 0 >"$log" 2>&1
  fi
  grep -E '^ +[0-9]' "$log" | tail -1 | awk '{print $6}'
}
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
printf '%-5s %-11s %8s %8s %8s %7s %7s  %s\n' mode op nccl A-med B-med A/nccl A/B "A rounds | B rounds"
for op in $OPS; do
  for mode in g2 mpi; do
    n=$(one "$NV" $op $mode); as=(); bs=()
    for r in $(seq "$ROUNDS"); do
      if (( r % 2 )); then as+=("$(one "$A" $op $mode)"); bs+=("$(one "$B" $op $mode)")
      else bs+=("$(one "$B" $op $mode)"); as+=("$(one "$A" $op $mode)"); fi
    done
    am=$(med "${as[@]}"); bm=$(med "${bs[@]}")
    printf '%-5s %-11s %8s %8s %8s %7s %7s  %s | %s\n' $mode $op "$n" "$am" "$bm" \
      "$(python3 -c "print('%.2f' % ($am/$n))" 2>/dev/null)" "$(python3 -c "print('%.2f' % ($am/$bm))" 2>/dev/null)" "${as[*]}" "${bs[*]}"
  done
done
