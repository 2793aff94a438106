#!/usr/bin/env bash
# tests/bench/monitor_tbf.sh LOGDIR -- does the throughput monitor see a NIC slow down?
#
# The two namespace "hosts" of nic_failover.sh (cclnic0/cclnic1, NICs nic0 and nic1). Two
# ranks run `ccl-perf sendrecv` on host memory over the multipath transport on both NICs with
# CCL_MONITOR=1. First a run without shaping measures host 0's nic1 rate (its tx bytes over
# the run); then, in the monitored runs, TBF_AT_S into the run a `tc qdisc ... tbf` on host
# 0's nic1 cuts it to a quarter of that rate for TBF_MS (300) ms. The qdisc changes are
# stamped with CLOCK_MONOTONIC, the clock whose reading at the monitor's zero each rank logs,
# so the monitor's anomaly and recovery are timed against them; the changes also go into the
# plotted file as transitions (orange lines).
#
# Writes LOGDIR/summary.txt, docs/monitor-tbf.png/.svg (window CCL_MONITOR_WINDOW, 8) and
# docs/monitor-windows.png/.svg (the same experiment with windows 1, 8 and 32: three runs,
# since the file holds window samples, not raw records). Environment: LIBDIR
# (target/release), SIZE (4M), ITERS (400), TBF_AT_S (1), TBF_MS (300), SPAN_US (unset: the
# library's CCL_MONITOR_SPAN_US default; 0 shows the windows' own effect; CCL_MONITOR_EARLY and
# the other CCL_MONITOR_* settings pass through), FIGS ("tbf
# windows": which of the two figures to write). Needs root and iproute2 (tc); leaves nothing
# behind.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 LOGDIR" >&2; exit 2; }
LOG=$(realpath -m "$1"); mkdir -p "$LOG"
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT"
LIBDIR=$(realpath "${LIBDIR:-target/release}")
SIZE=${SIZE:-4M} ITERS=${ITERS:-400} TBF_AT_S=${TBF_AT_S:-1} TBF_MS=${TBF_MS:-300}
SPAN_US=${SPAN_US-} FIGS=${FIGS:-tbf windows}
source tests/bench/two_hosts.sh
two_hosts_up monitor_tbf "$LOG"

# run NAME [ENV=VALUE ...]: both ranks, rank r's output in NAME.rankR.log.
run() {
  local name=$1; shift
  local port=$((20000 + RANDOM % 20000))
  for r in 1 0; do
    ip netns exec "cclnic$r" env CCL_RANK=$r CCL_NRANKS=2 NCCL_COMM_ID=10.78.0.1:$port \
      NCCL_SOCKET_IFNAME=nic0 CCL_NET=mpt CCL_MPT_IFNAMES=nic0,nic1 NCCL_DEBUG=INFO "$@" \
      LD_LIBRARY_PATH="$LIBDIR" timeout -s KILL 300 "$LIBDIR/ccl-perf" sendrecv --mem host \
      -b "$SIZE" -e "$SIZE" -n "$ITERS" -w 2 -c 0 > "$LOG/$name.rank$r.log" 2>&1 &
    pids[r]=$!
  done
}
wait_ranks() { wait "${pids[0]}"; local a=$?; wait "${pids[1]}"; return $((a | $?)); }
tx_bytes() { ip netns exec cclnic0 cat /sys/class/net/nic1/statistics/tx_bytes; }

# The unshaped rate of host 0's nic1.
b0=$(tx_bytes); t0=$(date +%s%N)
run plain; wait_ranks || { echo "monitor_tbf: unshaped run failed"; tail "$LOG"/plain.rank0.log; exit 1; }
b1=$(tx_bytes); t1=$(date +%s%N)
# In microseconds: bytes x 8 x 1e9 overflows shell arithmetic.
RATE_BPS=$(( (b1 - b0) * 8 * 1000000 / ((t1 - t0) / 1000) ))
TBF_BPS=$((RATE_BPS / 4))
echo "monitor_tbf: nic1 unshaped $((RATE_BPS / 1000000)) Mbit/s over the run; tbf at $((TBF_BPS / 1000000)) Mbit/s for $TBF_MS ms" | tee "$LOG/summary.txt"

# shaped NAME WINDOW: a monitored run with the qdisc change TBF_AT_S in; its times in NAME.tc.
shaped() {
  local name=$1 w=$2
  # Samples every 100 us (the default is 1 ms): the analysis times windows by them.
  run "$name" CCL_MONITOR=1 CCL_MONITOR_WINDOW="$w" CCL_MONITOR_FILE="$LOG/$name.%p.jsonl" \
    CCL_MONITOR_SAMPLE_US="${CCL_MONITOR_SAMPLE_US:-100}" \
    ${SPAN_US:+CCL_MONITOR_SPAN_US=$SPAN_US}
  # Inside host 0's namespace, so each change costs a tc exec and no more (CLOCK_MONOTONIC
  # is the same in every namespace); the line has the readings before and after it.
  ip netns exec cclnic0 python3 - "$LOG/$name.tc" "$TBF_AT_S" "$TBF_MS" "$TBF_BPS" <<'EOF'
import subprocess, sys, time
out, at, ms, bps = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tc = ["tc", "qdisc"]
time.sleep(at)
with open(out, "w") as f:
    t = time.monotonic_ns()
    subprocess.run(tc + ["add", "dev", "nic1", "root", "tbf", "rate", f"{bps}bit",
                         "burst", "64kb", "latency", "50ms"], check=True)
    f.write(f"add {t} {time.monotonic_ns()}\n")
    time.sleep(ms / 1000)
    t = time.monotonic_ns()
    subprocess.run(tc + ["del", "dev", "nic1", "root"], check=True)
    f.write(f"del {t} {time.monotonic_ns()}\n")
EOF
  wait_ranks || { echo "monitor_tbf: $name failed"; tail "$LOG/$name.rank0.log"; return 1; }
}

# analyse NAME: times of host 0's (rank 0's) first nic-1 anomaly after the qdisc went on and
# first recovery after it came off, on the qdisc's clock; writes NAME.marked.jsonl (rank 0's
# file with the qdisc changes as transitions) for plotting.
analyse() {
  python3 - "$LOG" "$1" <<'EOF'
import json, re, sys
log, name = sys.argv[1], sys.argv[2]
text = open(f"{log}/{name}.rank0.log").read()
origin = int(re.search(r"clock's 0 is CLOCK_MONOTONIC (\d+) ns", text).group(1))
# Rank 0's file, as its monitor logged it.
mine = re.search(r'Some\("([^"]+\.jsonl)"\)', text).group(1)
lines = [json.loads(l) for l in open(mine)]
tc = {k: (int(a), int(b)) for k, a, b in (l.split() for l in open(f"{log}/{name}.tc"))}
# The qdisc changed somewhere between the two readings: the later one is when it held.
add, dele = (tc["add"][1] - origin, tc["del"][1] - origin)
unc = max(tc["add"][1] - tc["add"][0], tc["del"][1] - tc["del"][0]) / 1e6
out = [f"{name}: qdisc on at {add/1e6:.1f} ms, off at {dele/1e6:.1f} ms (monitor clock; tc took up to {unc:.1f} ms)"]
def nic1(kind):
    return [l for l in lines if l.get("type") == kind and l["scope"] == "nic" and l["id"] == 1]
samples = nic1("sample")
def mean_ratio(t0, t1):
    """nic 1's mean sample throughput over [t0, t1) against nic 0's."""
    m = lambda nic: [l["tput_bps"] for l in lines if l.get("type") == "sample"
                     and l["scope"] == "nic" and l["id"] == nic and t0 <= l["ts_ns"] < t1]
    a, b = m(1), m(0)
    return (sum(a) / len(a)) / (sum(b) / len(b)) if a and b else float("nan")
span = dele - add
out.append(f"  nic1/nic0 mean window throughput: {mean_ratio(add - span, add):.2f} before, "
           f"{mean_ratio(add, dele):.2f} under tbf, {mean_ratio(dele, dele + span):.2f} after")
# The detector's view, sample by sample: below CCL_MONITOR_DROP (0.5) x baseline, and back
# to the recovery threshold (0.75 x baseline).
low = [l["ts_ns"] for l in samples if l["ts_ns"] >= add and l["tput_bps"] < 0.5 * l["baseline_bps"]]
back = [l["ts_ns"] for l in samples if l["ts_ns"] >= dele and l["tput_bps"] >= 0.75 * l["baseline_bps"]]
fmt = lambda v, t0: f"{(v - t0) / 1e6:+.1f} ms" if v is not None else "never"
out.append(f"  nic1 first window below 0.5 x baseline {fmt(min(low, default=None), add)} after tbf on; "
           f"first back above 0.75 x {fmt(min(back, default=None), dele)} after tbf off")
# The 2-core machine may not run the engines for milliseconds around the tc exec: the
# first nic-1 observation after the qdisc went on is when the monitor could first see it.
seen = min((l["ts_ns"] for l in samples if l["ts_ns"] >= add), default=None)
alerts = sorted((l["ts_ns"], l["type"]) for l in nic1("anomaly") + nic1("recovered"))
before = [k for t, k in alerts if t < add]
state = "anomalous" if before and before[-1] == "anomaly" else "normal"
fa = min((t for t, k in alerts if k == "anomaly" and t >= add), default=None)
fr = min((t for t, k in alerts if k == "recovered" and t >= dele), default=None)
out.append(f"  nic1 alerts: {state} at tbf on; first anomaly event {fmt(fa, add)} after tbf on, "
           f"first recovery event {fmt(fr, dele)} after tbf off; {len(alerts)} alert events in the run")
out.append(f"  nic1 first completion after tbf on {fmt(seen, add)}; first anomaly event "
           f"{fmt(fa, seen) if seen is not None else 'never'} after it")
# Alerts nothing caused: anomalies of any NIC away from the shaped spell (100 ms after it
# for the queued chunks to drain), and of the peer (a host that stalls every NIC).
away = lambda l: not (add <= l["ts_ns"] <= dele + 100_000_000)
nic_other = [l for l in lines if l.get("type") == "anomaly" and l["scope"] == "nic" and away(l)]
peer = [l for l in lines if l.get("type") == "anomaly" and l["scope"] == "peer"]
out.append(f"  NIC anomalies away from the spell: {len(nic_other)}; peer anomalies in the run: {len(peer)}")
print("\n".join(out))
with open(f"{log}/{name}.marked.jsonl", "w") as f:
    for l in lines:
        f.write(json.dumps(l) + "\n")
    for ts, frm, to in ((add, "full", "tbf"), (dele, "tbf", "full")):
        f.write(json.dumps({"ts_ns": ts, "type": "transition", "scope": "nic", "id": 1,
                            "from": frm, "to": to, "reason": "tc qdisc"}) + "\n")
EOF
}

tool=$LIBDIR/ccl-monitor
status=0
for w in 8 1 32; do
  shaped "w$w" "$w" || { status=1; continue; }
  analyse "w$w" | tee -a "$LOG/summary.txt"
done
if [ -f "$LOG/w8.marked.jsonl" ]; then
  "$tool" summary "$LOG/w8.marked.jsonl" | tee -a "$LOG/summary.txt"
  # The NICs around the qdisc change, 20 ms buckets (see `ccl-monitor plot --help`).
  span=$(python3 -c 'import json,sys; t=[json.loads(l)["ts_ns"]/1e6 for l in open(sys.argv[1]) if "tc qdisc" in l]; print(f"--from-ms {t[0]-700:.0f} --to-ms {t[1]+700:.0f}")' "$LOG/w8.marked.jsonl")
  for ext in png svg; do
    [[ " $FIGS " == *" tbf "* ]] || continue
    "$tool" plot "$LOG/w8.marked.jsonl" --scope nic --bucket-ms 20 $span --out "docs/monitor-tbf.$ext"
  done
fi
if [ -f "$LOG/w1.marked.jsonl" ] && [ -f "$LOG/w32.marked.jsonl" ]; then
  for ext in png svg; do
    [[ " $FIGS " == *" windows "* ]] || continue
    "$tool" panels "$LOG/w1.marked.jsonl" "$LOG/w8.marked.jsonl" "$LOG/w32.marked.jsonl" \
      --label "window 1" --label "window 8" --label "window 32" --scope nic --bucket-ms 20 \
      --from-ms 700 --to-ms 2600 --out "docs/monitor-windows.$ext"
  done
fi
exit $status
