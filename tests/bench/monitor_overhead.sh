#!/usr/bin/env bash
# tests/bench/monitor_overhead.sh LOGDIR -- what the throughput monitor costs.
#
# The two namespace hosts of nic_failover.sh, two ranks over the multipath transport on both
# NICs, host memory. For all_reduce and sendrecv at 1 MiB and 64 MiB, runs monitor off and
# on alternately (REPS pairs, off first in odd pairs and on first in even ones) and prints
# busbw (out-of-place, rank 0) and the CPU time (user + system, getrusage of each rank's
# process) of both ranks together, and the on/off ratios of their medians, the median and
# quartiles of each on run's ratio to the off run beside it, and each run's UDP datagrams
# dropped for a full receive buffer. Environment: LIBDIR (target/release), REPS (3),
# ITERS_SMALL (2000:
# at 200 a 1 MiB run timed about 0.13 s and its busbw swung 10% from run to run),
# ITERS_LARGE (10), OPS (all_reduce sendrecv), FILE (1: the monitor writes CCL_MONITOR_FILE; 0: no file), SIZES (1M 64M),
# ON_ENV (more VAR=VALUE settings of the monitored runs, say "CCL_MONITOR_POLL_US=100000"),
# PIN ("CPUS0 CPUS1": each rank's process kept on its CPU list, say "2-5 6-9"; on an idle
# 32-core nvidia-h200-x2 host four cores a rank cut 64 MiB busbw from ~6 to ~1.4 GB/s and
# left the on/off ratios no steadier: docs/device-runs/2026-11-30-x2-f83ccce/),
# ACCOUNT (0; 1: one more monitored run per case with NCCL_DEBUG=INFO, whose collectors log
# their own CPU time at exit: printed as a share of the ranks' CPU, a figure the load of other
# processes on the machine moves far less than the busbw ratios). Needs root and iproute2.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 LOGDIR" >&2; exit 2; }
LOG=$(realpath -m "$1"); mkdir -p "$LOG"
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT"
LIBDIR=$(realpath "${LIBDIR:-target/release}")
REPS=${REPS:-3} ITERS_SMALL=${ITERS_SMALL:-2000} ITERS_LARGE=${ITERS_LARGE:-10}
FILE=${FILE:-1} SIZES=${SIZES:-1M 64M} OPS=${OPS:-all_reduce sendrecv}
source tests/bench/two_hosts.sh
two_hosts_up monitor_overhead "$LOG"

# UDP datagrams both namespaces dropped for a full receive buffer so far (the multipath
# transport then retransmits: a run that lost many is slower for that, not for the monitor).
udp_drops() {
  local ns s=0
  for ns in cclnic0 cclnic1; do
    s=$((s + $(ip netns exec "$ns" awk '/^Udp:/ { if (h) { print $6; exit } h = 1 }' /proc/net/snmp)))
  done
  echo "$s"
}

# one COLL SIZE ITERS MON TAG [ENV=VALUE]: both ranks; each rank's CPU seconds in
# TAG.rankR.cpu.
one() {
  local coll=$1 size=$2 iters=$3 mon=$4 tag=$5 extra=${6:-}
  local port=$((20000 + RANDOM % 20000)) drops0
  drops0=$(udp_drops)
  for r in 1 0; do
    local pin; pin=$(echo "${PIN:-}" | awk -v k=$((r + 1)) '{print $k}')
    ip netns exec "cclnic$r" ${pin:+taskset -c "$pin"} env ${extra:+"$extra"} $([ "$mon" = 1 ] && echo "${ON_ENV:-}") CCL_RANK=$r CCL_NRANKS=2 NCCL_COMM_ID=10.78.0.1:$port \
      NCCL_SOCKET_IFNAME=nic0 CCL_NET=mpt CCL_MPT_IFNAMES=nic0,nic1 CCL_MONITOR="$mon" \
      CCL_MONITOR_FILE="$([ "$FILE" = 1 ] && echo "$LOG/$tag.%p.jsonl")" LD_LIBRARY_PATH="$LIBDIR" \
      python3 -c 'import resource, subprocess, sys
rc = subprocess.run(sys.argv[2:]).returncode
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{u.ru_utime + u.ru_stime:.3f}\n")
sys.exit(rc)' "$LOG/$tag.rank$r.cpu" timeout -s KILL 300 "$LIBDIR/ccl-perf" "$coll" --mem host \
      -b "$size" -e "$size" -n "$iters" -w 2 -c 0 > "$LOG/$tag.rank$r.log" 2>&1 &
    pids[r]=$!
  done
  wait "${pids[0]}"; wait "${pids[1]}"
  local bw cpu
  bw=$(grep -E "^ +[0-9]" "$LOG/$tag.rank0.log" | awk '{print $8}' | head -1)
  cpu=$(cat "$LOG/$tag.rank0.cpu" "$LOG/$tag.rank1.cpu" 2>/dev/null | awk '{s += $1} END {print s}')
  # The accounting runs (logging on) stay out of the table.
  [ -n "$extra" ] || echo "$coll $size $mon $bw $cpu $(($(udp_drops) - drops0))" >> "$LOG/raw.txt"
}

: > "$LOG/raw.txt"
cases=()
for size in $SIZES; do
  iters=$ITERS_LARGE; [ "$size" = 1M ] && iters=$ITERS_SMALL
  for op in $OPS; do cases+=("$op $size $iters"); done
done
for case in "${cases[@]}"; do
  set -- $case
  # Off first in odd pairs, on first in even ones: a drift over the run (the machine warming
  # up, the monitor's files filling the page cache) weighs on both settings alike.
  for k in $(seq "$REPS"); do
    order="0 1"; [ $((k % 2)) = 0 ] && order="1 0"
    for m in $order; do
      one "$1" "$2" "$3" "$m" "$1-$2-$([ "$m" = 1 ] && echo on || echo off)-$k"
    done
  done
done
# The collectors' own CPU time (microseconds, both ranks) against the ranks' CPU seconds.
: > "$LOG/account.txt"
if [ "${ACCOUNT:-0}" = 1 ]; then
  for case in "${cases[@]}"; do
    set -- $case
    one "$1" "$2" "$3" 1 "$1-$2-account" NCCL_DEBUG=INFO
    us=$(cat "$LOG/$1-$2-account".rank*.log | sed 's/\x1b\[[0-9;]*m//g' \
      | grep -o 'cpu_us=[0-9]*' | cut -d= -f2 | awk '{s += $1} END {print s + 0}')
    cpu=$(cat "$LOG/$1-$2-account".rank*.cpu | awk '{s += $1} END {print s}')
    echo "$1 $2 $us $cpu" >> "$LOG/account.txt"
  done
fi
python3 - "$LOG/raw.txt" "$LOG/account.txt" <<'EOF' | tee "$LOG/overhead.txt"
import statistics, sys
rows = {}
for l in open(sys.argv[1]):
    c, s, m, bw, cpu, drops = (l.split() + ["0"])[:6]
    rows.setdefault((c, s), {}).setdefault(m, []).append((float(bw), float(cpu), int(drops)))
print(f"{'collective':<11}{'size':>5}  {'busbw off':>10}{'busbw on':>10}{'ratio':>7}  {'cpu s off':>10}{'cpu s on':>10}{'ratio':>7}   (medians; runs off/on)")
paired = []
for (c, s), m in rows.items():
    med = lambda k, i: statistics.median(r[i] for r in m.get(k, [(0, 0)]))
    bo, bn, co, cn = med("0", 0), med("1", 0), med("0", 1), med("1", 1)
    runs = lambda k: ",".join(f"{r[0]:.3f}/{r[1]:.2f}" for r in m.get(k, []))
    print(f"{c:<11}{s:>5}  {bo:>10.3f}{bn:>10.3f}{bn/bo if bo else 0:>7.3f}  {co:>10.2f}{cn:>10.2f}{cn/co if co else 0:>7.3f}   off {runs('0')}  on {runs('1')}")
    # Each on run against the off run beside it: load that drifts over minutes cancels.
    pairs = [(n[0] / o[0], n[1] / o[1]) for o, n in zip(m.get("0", []), m.get("1", [])) if o[0] and o[1]]
    paired.append((c, s, pairs))
print("\npaired on/off ratios (each on run against the off run beside it): median [quartiles]")
for c, s, pairs in paired:
    def q(i):
        v = sorted(p[i] for p in pairs)
        if len(v) < 2:
            return f"{v[0] if v else 0:.3f}"
        qs = statistics.quantiles(v, n=4)
        return f"{statistics.median(v):.3f} [{qs[0]:.3f}, {qs[2]:.3f}]"
    print(f"{c:<11}{s:>5}  busbw {q(0)}  cpu {q(1)}  ({len(pairs)} pairs)")
print("\nUDP datagrams dropped for a full receive buffer, per run (both namespaces)")
for (c, s), m in rows.items():
    drops = lambda k: " ".join(str(r[2]) for r in m.get(k, []))
    print(f"{c:<11}{s:>5}  off {drops('0')}  on {drops('1')}")
acct = [l.split() for l in open(sys.argv[2]) if l.strip()]
if acct:
    print("\nthe collectors' CPU time (NCCL_DEBUG=INFO run, both ranks) against the ranks' CPU time")
for c, s, us, cpu in acct:
    print(f"{c:<11}{s:>5}  {int(us) / 1e3:8.1f} ms of {float(cpu):6.2f} s = {int(us) / 1e4 / float(cpu):.2f}%")
EOF
