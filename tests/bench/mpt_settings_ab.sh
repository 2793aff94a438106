#!/usr/bin/env bash
# tests/bench/mpt_settings_ab.sh LOGDIR -- two ranks over the multipath transport with
# settings side by side.
#
# The two namespace hosts of nic_failover.sh (veth NICs nic0 and nic1), one rank a host, host
# memory, the multipath transport on both NICs. For each op of OPS and size of SIZES, runs
# every setting of SETS in turn, ROUNDS times (the order rotated each round, so a machine
# whose speed drifts weighs on every setting alike), and prints busbw (out-of-place, rank 0)
# per run and the median per setting. SETS: space-separated NAME:VAR=VALUE[,VAR=VALUE...]
# ("base:" for the defaults). Environment: LIBDIR (target/release), OPS (sendrecv
# all_reduce), SIZES (1M 64M), ITERS_SMALL (1500, sizes below 64M), ITERS_LARGE (20), ROUNDS
# (3), PIN (1: rank r kept on CPU r, as on a machine with a core a rank; 0: unpinned).
# Needs root and iproute2.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 LOGDIR" >&2; exit 2; }
LOG=$(realpath -m "$1"); mkdir -p "$LOG"
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT"
LIBDIR=$(realpath "${LIBDIR:-target/release}")
OPS=${OPS:-sendrecv all_reduce} SIZES=${SIZES:-1M 64M} ROUNDS=${ROUNDS:-3} PIN=${PIN:-1}
ITERS_SMALL=${ITERS_SMALL:-1500} ITERS_LARGE=${ITERS_LARGE:-20}
read -r -a SETS <<< "${SETS:-base: inflight2M:CCL_MPT_INFLIGHT_BYTES=2097152}"
source tests/bench/two_hosts.sh
two_hosts_up mpt_settings_ab "$LOG"

# run OP SIZE ITERS ENVS TAG: both ranks; prints rank 0's out-of-place busbw.
run() {
  local op=$1 size=$2 iters=$3 envs=$4 tag=$5 port=$((20000 + RANDOM % 20000)) r
  local -a extra=(); [ -n "$envs" ] && IFS=, read -r -a extra <<< "$envs"
  for r in 1 0; do
    ip netns exec "cclnic$r" $([ "$PIN" = 1 ] && echo "taskset -c $r") env "${extra[@]}" \
      CCL_RANK=$r CCL_NRANKS=2 NCCL_COMM_ID=10.78.0.1:$port NCCL_SOCKET_IFNAME=nic0 \
      CCL_NET=mpt CCL_MPT_IFNAMES=nic0,nic1 LD_LIBRARY_PATH="$LIBDIR" \
      timeout -s KILL 300 "$LIBDIR/ccl-perf" "$op" --mem host -b "$size" -e "$size" \
      -n "$iters" -w 2 -c 0 > "$LOG/$tag.rank$r.log" 2>&1 &
    pids[r]=$!
  done
  wait "${pids[0]}"; wait "${pids[1]}"
  grep -E "^ +[0-9]" "$LOG/$tag.rank0.log" | awk '{print $8}' | head -1
}

: > "$LOG/raw.txt"
for op in $OPS; do
  for size in $SIZES; do
    iters=$ITERS_SMALL; [ "${size%M}" != "$size" ] && [ "${size%M}" -ge 64 ] && iters=$ITERS_LARGE
    for k in $(seq "$ROUNDS"); do
      n=${#SETS[@]}
      for j in $(seq 0 $((n - 1))); do
        set_=${SETS[$(((j + k - 1) % n))]}
        name=${set_%%:*} envs=${set_#*:}
        bw=$(run "$op" "$size" "$iters" "$envs" "$op-$size-$name-$k")
        echo "$op $size $name ${bw:-FAIL}" | tee -a "$LOG/raw.txt"
      done
    done
  done
done
python3 - "$LOG/raw.txt" <<'EOF' | tee "$LOG/summary.txt"
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    op, size, name, bw = line.split()
    runs.setdefault((op, size), {}).setdefault(name, []).append(bw)
print("op          size  setting        median GB/s  runs")
for (op, size), sets in runs.items():
    for name, bws in sets.items():
        ok = [float(b) for b in bws if b != "FAIL"]
        med = f"{statistics.median(ok):.2f}" if ok else "-"
        print(f"{op:<11} {size:>4}  {name:<14} {med:>11}  {' '.join(bws)}")
EOF
