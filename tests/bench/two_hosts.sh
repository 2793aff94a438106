# Sourced by the namespace benchmarks (nic_failover.sh, failover_measure.sh, monitor_tbf.sh,
# monitor_overhead.sh): two "hosts", network namespaces cclnic0 and cclnic1, joined by two veth
# "NICs" nic0 (10.78.0.0/24) and nic1 (10.78.1.0/24), host h at 10.78.k.(h+1).
#
#   two_hosts_up NAME LOG   takes the machine-wide lock, builds the namespaces (log in
#                           LOG/netns.log) and tears them down when the script exits.
NS=(cclnic0 cclnic1)

down() { for ns in "${NS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done; }

up() {
  down
  for ns in "${NS[@]}"; do ip netns add "$ns" && ip -n "$ns" link set lo up || return 1; done
  for k in 0 1; do
    # Both ends made inside the namespaces: nothing appears in the root namespace.
    ip -n cclnic0 link add "nic$k" type veth peer name "nic$k" netns cclnic1 || return 1
    ip -n cclnic0 addr add "10.78.$k.1/24" dev "nic$k" || return 1
    ip -n cclnic1 addr add "10.78.$k.2/24" dev "nic$k" || return 1
    ip -n cclnic0 link set "nic$k" up && ip -n cclnic1 link set "nic$k" up || return 1
  done
}

two_hosts_up() {
  local name=$1 log=$2
  # One run at a time on a machine: the namespaces are machine-wide, and a second run's setup
  # would tear down the first's under it.
  exec 8>/tmp/ccl-nic-failover.lock
  flock -w 900 8 || { echo "$name: another run holds /tmp/ccl-nic-failover.lock"; exit 2; }
  trap down EXIT
  up > "$log/netns.log" 2>&1 || {
    echo "$name: namespace setup failed (root and iproute2 needed)"
    cat "$log/netns.log"
    exit 2
  }
}
