#!/usr/bin/env bash
# tests/bench/net_bench.sh LOGDIR -- libccl between two "hosts": 2 ranks, one in each network
# namespace (scripts/netns.sh), for all_reduce, sendrecv and alltoall at one size (default
# 64 MiB), over CCL_NET=socket, CCL_NET=mpt, and mpt with CCL_MPT_DROP (default 0.01). Prints
# a markdown table of out-of-place busbw, the mpt/socket ratio and the share of loss-free busbw
# mpt keeps under loss, and exits non-zero on any wrong element or failed run.
# Environment: LIBDIR (default target/release), SIZE (64M), DROP (0.01), ITERS (5).
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 LOGDIR" >&2; exit 2; }
LOG=$(realpath -m "$1"); mkdir -p "$LOG"
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT"
LIBDIR=$(realpath "${LIBDIR:-target/release}")
SIZE=${SIZE:-64M} DROP=${DROP:-0.01} ITERS=${ITERS:-5}
scripts/netns.sh up 2 > "$LOG/netns.log" 2>&1 || { echo "netns up failed"; exit 2; }
status=0
run() { # name op env...
  local name=$1 op=$2; shift 2
  local port=$((20000 + RANDOM % 20000))
  for r in 1 0; do
    ip netns exec "cclns$r" env CCL_RANK=$r CCL_NRANKS=2 NCCL_COMM_ID=10.77.0.1:$port \
      NCCL_SOCKET_IFNAME=cclv LD_LIBRARY_PATH="$LIBDIR" "$@" \
      timeout 600 "$LIBDIR/ccl-perf" "$op" -b "$SIZE" -e "$SIZE" -n "$ITERS" -w 1 -c 1 \
      > "$LOG/$name.$op.rank$r.log" 2>&1 &
  done
  wait
  grep -E "^ +[0-9]" "$LOG/$name.$op.rank0.log" | awk '{print $8, $9}'
}
printf '| op | socket GB/s | mpt GB/s | mpt / socket | mpt, %s loss GB/s | kept under loss |\n|---|---:|---:|---:|---:|---:|\n' "$DROP"
for op in all_reduce sendrecv alltoall; do
  read -r s ws < <(run socket $op CCL_NET=socket)
  read -r m wm < <(run mpt $op CCL_NET=mpt)
  read -r d wd < <(run mptdrop $op CCL_NET=mpt CCL_MPT_DROP=$DROP)
  for w in "$ws" "$wm" "$wd"; do [ "$w" = 0 ] || [ "$w" = N/A ] || status=1; done
  awk -v op=$op -v s="$s" -v m="$m" -v d="$d" 'BEGIN { printf "| %s | %s | %s | %.2f | %s | %.0f%% |\n", op, s, m, (s>0?m/s:0), d, (m>0?100*d/m:0) }'
done | tee "$LOG/summary.md"
scripts/netns.sh down >> "$LOG/netns.log" 2>&1 || true
exit $status
