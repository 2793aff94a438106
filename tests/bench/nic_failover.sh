#!/usr/bin/env bash
# tests/bench/nic_failover.sh LOGDIR -- a NIC port dies under a running collective.
#
# Two "hosts" (network namespaces cclnic0 and cclnic1) joined by two "NICs": veth pairs nic0
# (10.78.0.0/24) and nic1 (10.78.1.0/24). Two ranks, one per host, run `ccl-perf all_reduce`
# with checking over the multipath transport with CCL_MPT_IFNAMES, and partway through the run
# host 0's nic1 goes down (`ip link set nic1 down`) and, CUT_S later, comes back:
#
#   0. paths on both NICs (CCL_MPT_IFNAMES=nic0,nic1), nothing cut: the baseline time;
#   1. the same, nic1 cut for CUT_S seconds: the run must finish, every element exact;
#   2. the same with the link left down to the end: must finish, exact (nic0 alone carries it);
#   3. every path on the NIC that is cut (CCL_MPT_IFNAMES=nic1) and left down: no path is
#      left, so the run must fail -- within the deadline, not hang, with ncclRemoteError and
#      a message that says "network failure";
#   4. no CCL_MPT_IFNAMES but NCCL_SOCKET_IFNAME=nic, which names both NICs (as NCCL's socket
#      transport, libccl then uses both): nic1 cut to the end, must finish, exact;
#   5. paths on both NICs, and nic0 -- the one the ranks bootstrapped over, which carries their
#      TCP control connections -- cut to the end: must finish, exact, and exit cleanly.
#
# Prints one line per case (PASS/FAIL, wall seconds and their ratio to case 0, wrong elements)
# and exits non-zero if any case does not end as it must, or if a cut came after the run had
# already ended (then raise ITERS). Environment: LIBDIR (default target/release), SIZE (64M),
# ITERS (150), CUT_AT_S (1: seconds into the run), CUT_S (2: seconds down in case 1); the
# ranks inherit the rest of the environment (CCL_MPT_CC=eqds, say).
# Needs root and iproute2; leaves nothing behind.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 LOGDIR" >&2; exit 2; }
LOG=$(realpath -m "$1"); mkdir -p "$LOG"
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT"
LIBDIR=$(realpath "${LIBDIR:-target/release}")
SIZE=${SIZE:-64M} ITERS=${ITERS:-150} CUT_AT_S=${CUT_AT_S:-1} CUT_S=${CUT_S:-2}
source tests/bench/two_hosts.sh
two_hosts_up nic_failover "$LOG"

echo "nic_failover: congestion control ${CCL_MPT_CC:-cubic (default)}, $SIZE x $ITERS all_reduce, cut ${CUT_AT_S} s in"
status=0
base_ms=
# case name, CCL_MPT_IFNAMES, cut (none | back: down for CUT_S | forever), expect (ok|fail),
# NCCL_SOCKET_IFNAME (default nic0), the NIC of host 0 that is cut (default nic1)
run_case() {
  local name=$1 nics=$2 cut=$3 expect=$4 ifname=${5:-nic0} victim=${6:-nic1}
  local port=$((20000 + RANDOM % 20000))
  local t0 t_end
  t0=$(date +%s%N)
  for r in 1 0; do
    ip netns exec "cclnic$r" env CCL_RANK=$r CCL_NRANKS=2 NCCL_COMM_ID=10.78.0.1:$port \
      NCCL_SOCKET_IFNAME="$ifname" CCL_NET=mpt CCL_MPT_IFNAMES="$nics" NCCL_DEBUG=INFO \
      LD_LIBRARY_PATH="$LIBDIR" timeout -s KILL ${RANK_TIMEOUT_S:-180} "$LIBDIR/ccl-perf" all_reduce \
      -b "$SIZE" -e "$SIZE" -n "$ITERS" -w 1 -c 1 > "$LOG/$name.rank$r.log" 2>&1 &
    pids[r]=$!
  done
  local late=0
  if [ "$cut" != none ]; then
    sleep "$CUT_AT_S"
    # A cut after both ranks ended tests nothing.
    kill -0 "${pids[0]}" 2>/dev/null || kill -0 "${pids[1]}" 2>/dev/null || late=1
    ip -n cclnic0 link set "$victim" down
    echo "$(date +%T.%N) $victim of host 0 down" >> "$LOG/$name.events"
    if [ "$cut" = back ]; then
      sleep "$CUT_S"
      ip -n cclnic0 link set "$victim" up
      echo "$(date +%T.%N) $victim of host 0 up" >> "$LOG/$name.events"
    fi
  fi
  local rc0 rc1
  wait "${pids[0]}"; rc0=$?
  wait "${pids[1]}"; rc1=$?
  t_end=$(date +%s%N)
  ip -n cclnic0 link set "$victim" up
  local ms=$(((t_end - t0) / 1000000))
  [ -n "$base_ms" ] || base_ms=$ms
  local wrong
  wrong=$(grep -E "^ +[0-9]" "$LOG/$name.rank0.log" | awk '{print $9}' | head -1)
  local verdict=FAIL
  if [ "$expect" = ok ]; then
    # Every two-NIC case must have spread the paths over both.
    [ "$rc0" = 0 ] && [ "$rc1" = 0 ] && [ "$wrong" = 0 ] &&
      grep -q "mpt paths spread over 2 NICs" "$LOG/$name.rank0.log" && verdict=PASS
  else
    # Must fail, with an error of ours rather than the deadline's SIGKILL (rc 137): NCCL's
    # remote error, saying what happened.
    [ "$rc0" != 0 ] && [ "$rc0" != 137 ] && [ "$rc1" != 137 ] &&
      grep -q "network failure" "$LOG/$name.rank0.log" "$LOG/$name.rank1.log" &&
      grep -q "remote process exited or there was a network error" "$LOG/$name.rank0.log" &&
      verdict=PASS
  fi
  [ $late = 0 ] || verdict="FAIL (the cut came after the run: raise ITERS)"
  [ "$verdict" = PASS ] || status=1
  printf '%s  %-22s CCL_MPT_IFNAMES=%-10s cut %s %-7s expect %-4s  rc %s/%s  wrong %-4s %6.1f s  x%.2f of case 0\n' \
    "$verdict" "$name" "$nics" "$victim" "$cut" "$expect" "$rc0" "$rc1" "${wrong:-none}" \
    "$(awk -v m="$ms" 'BEGIN { print m / 1000 }')" "$(awk -v m="$ms" -v b="$base_ms" 'BEGIN { print m / b }')"
  [ "$verdict" = PASS ] || tail -5 "$LOG/$name.rank0.log" | sed 's/^/    /'
}
run_case two-nics nic0,nic1 none ok
run_case two-nics-cut-and-back nic0,nic1 back ok
run_case two-nics-cut-for-good nic0,nic1 forever ok
run_case one-nic-cut-for-good nic1 forever fail
run_case socket-ifname-two-nics "" forever ok nic
run_case bootstrap-nic-cut-for-good nic0,nic1 forever ok nic0 nic0
exit $status
