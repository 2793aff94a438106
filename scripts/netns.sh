#!/usr/bin/env bash
# scripts/netns.sh -- several "hosts" on one machine, for multi-node tests of libccl.
#
#   scripts/netns.sh up N      create namespaces cclns0..cclns{N-1}
#   scripts/netns.sh down      remove everything this script created
#   scripts/netns.sh status    show what exists
#
# Layout (all of it private; nothing is added to the root namespace):
#   * namespace cclhub holds a bridge cclbr0 (no address);
#   * namespace cclns<i> holds lo (up) and cclv<i> with 10.77.0.<i+1>/24, the inside end of a
#     veth pair whose other end, cclh<i>, is a port of cclbr0 in cclhub.
#   So every namespace reaches every other one over 10.77.0.0/24 through the bridge. Inside
#   a namespace the only interfaces are lo and cclv<i>: NCCL_SOCKET_IFNAME=cclv selects it.
#   Keeping the bridge in its own namespace keeps host firewall/bridge-netfilter rules of the
#   root namespace out of the path and leaves the root namespace untouched.
#   * cclbr0 itself has 10.77.0.254/24: the address of a launcher run inside cclhub. OpenMPI's
#     mpirun (its PMIx server) must be reachable from ranks that sit in the namespaces, and the
#     root namespace has no route to them (tests/abi/run.sh runs "ip netns exec cclhub mpirun").
#
# Cutting a link (later fault tests):  ip -n cclhub link set cclh1 down   (or ... up)
# Running something inside:            ip netns exec cclns0 <command>
#
# Idempotent: "up N" creates only what is missing, fixes addresses/state, and removes
# namespaces cclns<j> with j >= N left over from an earlier, larger "up". Needs root + iproute2.
set -euo pipefail

PREFIX=cclns
HUB=cclhub
BR=cclbr0
SUBNET=10.77.0
MAXN=250

say() { printf 'netns.sh: %s\n' "$*"; }
die() { printf 'netns.sh: error: %s\n' "$*" >&2; exit 1; }

ns_exists() { [ -e "/var/run/netns/$1" ] || ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }

ensure_ns() {
  local ns=$1
  if ns_exists "$ns"; then
    say "namespace $ns exists"
  else
    ip netns add "$ns"
    say "created namespace $ns"
  fi
  ip -n "$ns" link set lo up
}

ensure_hub() {
  ensure_ns "$HUB"
  if ip -n "$HUB" link show "$BR" >/dev/null 2>&1; then
    say "bridge $BR exists in $HUB"
  else
    ip -n "$HUB" link add "$BR" type bridge
    say "created bridge $BR in $HUB"
  fi
  # No STP, no forwarding delay: ports forward as soon as they are up.
  ip -n "$HUB" link set "$BR" type bridge stp_state 0 forward_delay 0 2>/dev/null || true
  ip -n "$HUB" addr replace "$SUBNET.254/24" dev "$BR"
  ip -n "$HUB" link set "$BR" up
  say "bridge $BR up with $SUBNET.254/24 (launcher address)"
}

ensure_node() {
  local i=$1 ns="$PREFIX$1" in="cclv$1" out="cclh$1" addr="$SUBNET.$(($1 + 1))/24"
  ensure_ns "$ns"
  if ! ip -n "$ns" link show "$in" >/dev/null 2>&1; then
    # A stale half (hub side without its peer) would block the name: remove it first.
    ip -n "$HUB" link del "$out" >/dev/null 2>&1 || true
    ip link del "$out" >/dev/null 2>&1 || true
    ip link del "$in" >/dev/null 2>&1 || true
    # Create the pair in the root namespace under temporary names, then move each end.
    ip link add "$in" type veth peer name "$out"
    ip link set "$in" netns "$ns"
    ip link set "$out" netns "$HUB"
    say "created veth $in ($ns) <-> $out ($HUB)"
  else
    say "veth $in exists in $ns"
  fi
  ip -n "$HUB" link set "$out" master "$BR"
  ip -n "$HUB" link set "$out" up
  ip -n "$ns" addr replace "$addr" dev "$in"
  ip -n "$ns" link set "$in" up
  say "$ns: lo up, $in $addr up"
}

remove_ns() {
  local ns=$1
  if ns_exists "$ns"; then
    ip netns del "$ns"   # deleting a namespace destroys the veth ends inside it
    say "removed namespace $ns"
  fi
}

existing_nodes() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$PREFIX[0-9]+$" | sed "s/^$PREFIX//" | sort -n || true
}

cmd_up() {
  local n=${1:-}
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le "$MAXN" ] || die "usage: $0 up N (1..$MAXN)"
  [ "$(id -u)" -eq 0 ] || die "must run as root"
  command -v ip >/dev/null || die "iproute2 (ip) not found"
  ensure_hub
  local i
  for ((i = 0; i < n; i++)); do ensure_node "$i"; done
  for i in $(existing_nodes); do
    if [ "$i" -ge "$n" ]; then remove_ns "$PREFIX$i"; fi
  done
  check_connectivity "$n"
  say "up: $n namespaces ${PREFIX}0..$PREFIX$((n - 1)), addresses $SUBNET.1..$SUBNET.$n, NCCL_SOCKET_IFNAME=cclv"
}

# Every namespace must reach the hub address (bridge ports come up asynchronously, so retry).
# Uses ping when installed, else a TCP connect with python3, else skips the check.
check_connectivity() {
  local n=$1 i tries ok
  if command -v ping >/dev/null; then
    for ((i = 0; i < n; i++)); do
      ok=0
      for tries in 1 2 3 4 5 6 7 8 9 10; do
        if ip netns exec "$PREFIX$i" ping -c1 -W1 "$SUBNET.254" >/dev/null 2>&1; then ok=1; break; fi
        sleep 0.2
      done
      [ "$ok" -eq 1 ] || die "$PREFIX$i cannot reach $SUBNET.254"
    done
  elif command -v python3 >/dev/null; then
    local port=$((20000 + RANDOM % 20000))
    ip netns exec "$HUB" python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(64); s.settimeout(10)
for _ in range(int(sys.argv[3])): s.accept()[0].close()
' "$SUBNET.254" "$port" "$n" &
    local lpid=$!
    for ((i = 0; i < n; i++)); do
      ok=0
      for tries in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
        if ip netns exec "$PREFIX$i" python3 -c '
import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()
' "$SUBNET.254" "$port" >/dev/null 2>&1; then ok=1; break; fi
        sleep 0.2
      done
      if [ "$ok" -ne 1 ]; then kill "$lpid" 2>/dev/null || true; die "$PREFIX$i cannot reach $SUBNET.254"; fi
    done
    wait "$lpid" 2>/dev/null || true
  else
    say "no ping or python3: connectivity not checked"
    return 0
  fi
  say "connectivity checked: every namespace reaches $SUBNET.254"
}

cmd_down() {
  [ "$(id -u)" -eq 0 ] || die "must run as root"
  local i any=0
  for i in $(existing_nodes); do remove_ns "$PREFIX$i"; any=1; done
  if ns_exists "$HUB"; then remove_ns "$HUB"; any=1; fi
  [ "$any" -eq 1 ] || say "nothing to remove"
  say "down"
}

cmd_status() {
  local i
  if ns_exists "$HUB"; then
    say "$HUB:"; ip -n "$HUB" -br link show | sed 's/^/    /'
  else
    say "$HUB: absent"
  fi
  for i in $(existing_nodes); do
    say "$PREFIX$i:"; ip -n "$PREFIX$i" -br addr show | sed 's/^/    /'
  done
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) die "usage: $0 up N | down | status" ;;
esac
