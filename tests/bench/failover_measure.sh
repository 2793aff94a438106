#!/usr/bin/env bash
# tests/bench/failover_measure.sh LOGDIR -- how fast traffic leaves a dead NIC and comes back.
#
# The two "hosts" and two "NICs" of nic_failover.sh (namespaces cclnic0/cclnic1, veth nic0
# 10.78.0.0/24 and nic1 10.78.1.0/24), RANKS_PER_HOST ranks per host (default 1), host memory.
# For each transport (NET: socket = the failover TCP link, the primary on the NIC the topology
# plan gives the lower rank of the pair -- a host's first rank nic0, its second nic1 -- and the
# backup on the other; mpt = the multipath transport with paths on both NICs) and each op
# (all_reduce, sendrecv, alltoall, SIZE 64M, checked with -c 1):
#   backup-alone  everything on nic1 only (bootstrap included): the backup's own busbw;
#   cut-for-good  nic0 of host 0 down CUT_AT_S (1) s in, to the end: busbw while on the backup
#                 (the first second on nic0 included);
#   cut-and-back  nic0 down DOWN_AT_S (2) s in, up UP_AFTER_S (4) s later: every result exact;
#                 from the library's own log (NCCL_DEBUG=INFO, timestamps of the subscriber):
#                 link down -> traffic flowing on the backup, link up -> nic0 ready again (socket:
#                 the sender's switch back; mpt: a nic0 path's probe answered) and traffic on
#                 nic0 again (socket: the first ack on the primary; mpt: the first chunk sent on
#                 a nic0 path after its revival and acknowledged, "data flows again"), which
#                 comes later when the ranks had nothing to send at that moment (between two
#                 operations, ccl-perf checking results),
#                 counted from just before the `ip link set` (the line also gives how long the
#                 command took: on a loaded machine that delay is part of the figures), and
#                 for link up also from the moment the kernel reports nic0's state UP (its
#                 link watcher runs at most once a second, so that can be up to 1 s later);
#   renumber      as cut-and-back, on host RENUMBER_HOST (default 1: the side that accepts the
#                 failover links' redials), and nic0 comes back with another address
#                 (10.78.0.h+11 for 10.78.0.h+1; the bootstrap goes over nic1, whose address
#                 stays): the link must find the new address (socket: the peer redials the
#                 new listener; mpt: the renumbered side rebinds nic0's paths on the new
#                 address, and the other side's failed paths take their probes from there);
#                 the old address is put back after the run;
#   both          nic0 and nic1 of host 0 down CUT_AT_S in, for good, with CCL_TIMEOUT_S=
#                 BOTH_TIMEOUT_S (10): every rank must exit with an error within that many
#                 seconds of the cut, each aborting its communicator (ccl-perf does on an
#                 error) and the abort returning ("exact" then means: all did); the line gives
#                 the last rank's exit after the cut and the slowest abort;
#   plain, armed  no cut: one NIC (nic0) without failover, and both NICs with failover on (the
#                 backup armed); give them several times in MODES, the end prints each one's
#                 median busbw and armed / plain (alone and forever repeated likewise:
#                 forever / alone, the backup's share of its own busbw).
# Environment: LIBDIR (default target/release), ITERS (per run; raise it if a run ends before
# the cut: the line says "late"), NETS ("socket mpt"), OPS, MODES ("alone forever back
# both"), ARP_RETRANS_MS (below). Needs root and iproute2.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 LOGDIR" >&2; exit 2; }
LOG=$(realpath -m "$1"); mkdir -p "$LOG"
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT"
LIBDIR=$(realpath "${LIBDIR:-target/release}")
SIZE=${SIZE:-64M} ITERS=${ITERS:-40} RPH=${RANKS_PER_HOST:-1}
CUT_AT_S=${CUT_AT_S:-1} DOWN_AT_S=${DOWN_AT_S:-2} UP_AFTER_S=${UP_AFTER_S:-4}
NETS=${NETS:-socket mpt} OPS=${OPS:-all_reduce sendrecv alltoall}
MODES=${MODES:-alone forever back both} BOTH_TIMEOUT_S=${BOTH_TIMEOUT_S:-10}
# Host memory even where a GPU is (MEM=device: GPU buffers, the network path staging them).
MEM=${MEM:-host}
source tests/bench/two_hosts.sh
two_hosts_up failover_measure "$LOG"
# An ARP request sent after `ip link set up` but before the kernel's link watcher activates the
# device is dropped, and the neighbour entry then waits the ARP retry time (1 s by default)
# before asking again: on a loaded machine that alone can hold a reconnection for a second.
# ARP_RETRANS_MS (default 100; "" keeps the kernel's) shortens the retry on the NICs.
ARP_RETRANS_MS=${ARP_RETRANS_MS-100}
if [ -n "$ARP_RETRANS_MS" ]; then
  for h in 0 1; do for k in 0 1; do
    ip netns exec "cclnic$h" sysctl -qw "net.ipv4.neigh.nic$k.retrans_time_ms=$ARP_RETRANS_MS"
  done; done
fi

now() { date +%s.%N; }
# Seconds (epoch) of a tracing line's RFC 3339 stamp.
stamp() { date -d "$(echo "$1" | awk '{print $1}')" +%s.%N; }
# The first line of FILE matching RE whose stamp is at or after T: its epoch seconds.
first_after() {
  local file=$1 re=$2 t=$3 line s
  while IFS= read -r line; do
    s=$(stamp "$line" 2>/dev/null) || continue
    awk -v a="$s" -v b="$t" 'BEGIN { exit !(a >= b) }' && { echo "$s"; return; }
  done < <(grep -a -E "$re" "$file" | sed 's/\x1b\[[0-9;]*m//g')
}
ms() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f ms", (a - b) * 1000 }' || echo "n/a"; }

# run NAME NET OP MODE(alone|forever|back|both): starts the ranks, cuts as MODE says, waits.
run() {
  local name=$1 net=$2 op=$3 mode=$4 port=$((20000 + RANDOM % 20000)) n=$((2 * RPH))
  local comm=10.78.0.1 ifname=nic nics=nic0,nic1 fo=1 ch=0
  [ "$mode" = alone ] && { comm=10.78.1.1; ifname=nic1; nics=nic1; }
  [ "$mode" = renumber ] && { comm=10.78.1.1; ch=${RENUMBER_HOST:-1}; }
  local old=10.78.0.$((ch + 1))/24 new=10.78.0.$((ch + 11))/24
  [ "$mode" = plain ] && { ifname=nic0; nics=nic0; fo=0; }
  local pids=() r h
  for ((r = n - 1; r >= 0; r--)); do
    h=$((r / RPH))
    ip netns exec "cclnic$h" env CCL_RANK=$r CCL_NRANKS=$n NCCL_COMM_ID=$comm:$port \
      NCCL_SOCKET_IFNAME=$ifname CCL_NET=$net CCL_SOCKET_FAILOVER=$fo CCL_MPT_IFNAMES=$nics NCCL_DEBUG=INFO \
      CCL_TIMEOUT_S=$([ "$mode" = both ] && echo "$BOTH_TIMEOUT_S" || echo 0) \
      LD_LIBRARY_PATH="$LIBDIR" timeout -s KILL 300 "$LIBDIR/ccl-perf" "$op" --mem "$MEM" \
      -b "$SIZE" -e "$SIZE" -n "$ITERS" -w 1 -c 1 > "$LOG/$name.rank$r.log" 2>&1 &
    pids[r]=$!
  done
  T_DOWN= T_UP= T_OPER= CUT_MS= UP_MS=
  if [ "$mode" != alone ] && [ "$mode" != plain ] && [ "$mode" != armed ]; then
    sleep "$([ "$mode" = back ] || [ "$mode" = renumber ] && echo "$DOWN_AT_S" || echo "$CUT_AT_S")"
    LATE=0; kill -0 "${pids[0]}" 2>/dev/null || LATE=1
    T_DOWN=$(now); ip -n cclnic$ch link set nic0 down
    [ "$mode" = both ] && ip -n cclnic0 link set nic1 down
    CUT_MS=$(ms "$(now)" "$T_DOWN")
    if [ "$mode" = renumber ]; then
      ip -n cclnic$ch addr del "$old" dev nic0; ip -n cclnic$ch addr add "$new" dev nic0
    fi
    if [ "$mode" = back ] || [ "$mode" = renumber ]; then
      sleep "$UP_AFTER_S"; T_UP=$(now); ip -n cclnic$ch link set nic0 up
      UP_MS=$(ms "$(now)" "$T_UP")
      # The kernel passes traffic on a device only once its link watcher has seen the
      # carrier (which it does at most once a second): that moment, when the operational
      # state turns UP, is the link coming up.
      local i
      for ((i = 0; i < 300; i++)); do
        ip -n cclnic$ch -o link show nic0 | grep -q 'state UP' && break
        sleep 0.01
      done
      T_OPER=$(now)
      kill -0 "${pids[0]}" 2>/dev/null || LATE=1
    fi
  fi
  RC=0 LAST_EXIT= FAILED=0
  if [ "$mode" = both ]; then
    # When each rank exits, to 50 ms.
    local left=$n
    while [ "$left" -gt 0 ]; do
      left=0
      for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && left=$((left + 1)); done
      [ "$left" -gt 0 ] && sleep 0.05
    done
    LAST_EXIT=$(now)
  fi
  for p in "${pids[@]}"; do
    if wait "$p"; then :; else RC=$?; FAILED=$((FAILED + 1)); fi
  done
  ip -n cclnic0 link set nic0 up; ip -n cclnic0 link set nic1 up
  if [ "$mode" = renumber ]; then
    ip -n cclnic$ch addr del "$new" dev nic0; ip -n cclnic$ch addr add "$old" dev nic0
    ip -n cclnic$ch link set nic0 up
  fi
  local line; line=$(grep -E "^ +[0-9]" "$LOG/$name.rank0.log" | head -1)
  # Out-of-place busbw (GB/s); exactness is checked on both halves by `exact`.
  BUSBW=$(echo "$line" | awk '{print $8}')
}

# ccl-perf prints out-of-place then in-place figures; column 9 and the last are their #wrong
# (N/A where in place is not checked).
exact() { grep -E "^ +[0-9]" "$1" | awk '{ ok = ($9 == 0 || $9 == "N/A") && ($NF == 0 || $NF == "N/A"); exit !ok }'; }

status=0
declare -A COST
printf '%-7s %-10s %-13s %-5s %-6s %9s  %s\n' net op case rc exact busbw timings
for net in $NETS; do
  if [ "$net" = socket ]; then
    down_re='traffic flowing on Backup'; up_re='traffic flowing on Primary'
    # The sender's switch back (the new primary probed, the hold-down over): the link is ready.
    ready_re='send stream on Primary'
  else
    # Paths on NIC 0 (nic0, the first of CCL_MPT_IFNAMES) only: the cut one.
    down_re='mpt path [0-9]+ on NIC 0: chunk lost, penalised'
    up_re='mpt path [0-9]+ on NIC 0: data flows again'
    # A nic0 path back in use (its probe answered): the link is ready.
    ready_re='mpt path [0-9]+ on NIC 0: (probe answered|delivers again)'
  fi
  for op in $OPS; do
    declare -A SEEN=()
    for mode in $MODES; do
      # A mode given several times keeps each run's logs: the second is NAME.2, and so on.
      SEEN[$mode]=$((${SEEN[$mode]:-0} + 1))
      name=$net-$op-$mode; [ "${SEEN[$mode]}" = 1 ] || name=$name.${SEEN[$mode]}
      LATE=0
      run "$name" "$net" "$op" "$mode"
      ok=no; exact "$LOG/$name.rank0.log" && [ "$RC" = 0 ] && ok=yes
      t=""
      if [ "$mode" = both ]; then
        # Every rank failed, the last within BOTH_TIMEOUT_S of the cut.
        ok=no; BUSBW=
        awk -v a="$LAST_EXIT" -v b="$T_DOWN" -v s="$BOTH_TIMEOUT_S" 'BEGIN { exit !(a - b <= s) }' &&
          [ "$FAILED" = $((2 * RPH)) ] && ok=yes
        # Each failed rank aborts its communicator (ccl-perf on an error): it must return.
        aborts=$(cat "$LOG/$name".rank*.log | grep -ao 'ncclCommAbort returned in [0-9.]* ms' | awk '{print $4}')
        na=$(echo "$aborts" | grep -c .); amax=$(echo "$aborts" | sort -g | tail -n 1)
        [ "$na" = $((2 * RPH)) ] || ok=no
        t="ranks failed $FAILED/$((2 * RPH)), last exit $(ms "$LAST_EXIT" "$T_DOWN") after the cut, aborts returned $na/$((2 * RPH)) (slowest ${amax:-none} ms)"
        [ "$LATE" = 0 ] || t="$t (late: run ended before the cut/up, raise ITERS)"
      elif [ "$mode" = plain ] || [ "$mode" = armed ] || [ "$mode" = alone ]; then
        COST["$net $op $mode"]="${COST["$net $op $mode"]:-} $BUSBW"
      else
        [ "$mode" = forever ] && COST["$net $op $mode"]="${COST["$net $op $mode"]:-} $BUSBW"
        logs=$(ls "$LOG/$name".rank*.log)
        f=; for l in $logs; do x=$(first_after "$l" "$down_re" "$T_DOWN"); [ -n "$x" ] && { [ -z "$f" ] || awk -v a="$x" -v b="$f" 'BEGIN{exit !(a<b)}'; } && f=$x; done
        t="down->backup $(ms "$f" "$T_DOWN")"
        if [ "$mode" = back ] || [ "$mode" = renumber ]; then
          g=; for l in $logs; do x=$(first_after "$l" "$up_re" "$T_UP"); [ -n "$x" ] && { [ -z "$g" ] || awk -v a="$x" -v b="$g" 'BEGIN{exit !(a<b)}'; } && g=$x; done
          k=; for l in $logs; do x=$(first_after "$l" "$ready_re" "$T_UP"); [ -n "$x" ] && { [ -z "$k" ] || awk -v a="$x" -v b="$k" 'BEGIN{exit !(a<b)}'; } && k=$x; done
          # Ready: nic0 back in use; traffic: its first acknowledged bytes, later when the
          # ranks had nothing to send then (between two operations, checking results).
          t="$t, up->nic0 ready $(ms "$k" "$T_UP"), traffic $(ms "$g" "$T_UP") (link UP $(ms "$T_OPER" "$T_UP") after the command, then $(ms "$g" "$T_OPER"))"
        fi
        # Times count from before the ip command; on a loaded machine it can take long.
        t="$t [ip down took $CUT_MS${UP_MS:+, up $UP_MS}]"
        [ "$LATE" = 0 ] || t="$t (late: run ended before the cut/up, raise ITERS)"
      fi
      [ "$ok" = yes ] || status=1
      printf '%-7s %-10s %-13s %-5s %-6s %9s  %s\n' "$net" "$op" "$mode" "$RC" "$ok" "$BUSBW" "$t"
    done
  done
done
# Pairs of modes repeated in MODES -- armed (both NICs, failover on, no cut) against plain (one
# NIC, no failover), forever (nic0 cut for good) against alone (nic1 only): the median busbw
# of each and their ratio, per transport and op.
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for pair in "armed plain" "forever alone"; do
  set -- $pair
  for net in $NETS; do
    for op in $OPS; do
      a=${COST["$net $op $1"]:-}; p=${COST["$net $op $2"]:-}
      [ -n "$a" ] && [ -n "$p" ] || continue
      ma=$(echo "$a" | median); mp=$(echo "$p" | median)
      printf '%-7s %-10s %s/%s busbw %s / %s = %s (runs:%s /%s)\n' "$net" "$op" "$1" "$2" "$ma" "$mp" \
        "$(awk -v a="$ma" -v b="$mp" 'BEGIN { printf "%.3f", a / b }')" "$a" "$p"
    done
  done
done
exit $status
