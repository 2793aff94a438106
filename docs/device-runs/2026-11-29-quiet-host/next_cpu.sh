#!/usr/bin/env bash
# For an nvidia-h200 call when no multi-GPU kind is lent (carry .dev; .dev/net holds iproute2):
# the host benchmarks that the 2-core CPU machine cannot resolve, on the H200 machine's 16 idle
# cores. PART=armed: the socket failover link armed against plain after 6b7eb67 (receive ring)
# and 1f5ecce (fewer receive calls), six pairs per op (about 8 minutes). PART=monitor: monitor
# on/off at 1 MiB with the JSON file and without, each run's UDP receive-buffer drops (about 9
# minutes). Output under $OUT.
set -uo pipefail
export PATH=$PWD/.dev/net/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
case ${PART:-armed} in
  armed)
    LIBDIR=.dev RANKS_PER_HOST=2 NETS=socket OPS="all_reduce sendrecv" ITERS=200 \
      MODES="plain armed plain armed plain armed plain armed plain armed plain armed" \
      timeout 560 bash tests/bench/failover_measure.sh "$OUT/fo" > "$OUT/armed.txt" 2>&1
    grep -vE "^\s*$" "$OUT/armed.txt" | tail -n 30; rm -rf "$OUT/fo" ;;
  monitor)
    for f in 1 0; do
      FILE=$f SIZES=1M REPS=10 LIBDIR=.dev timeout 270 bash tests/bench/monitor_overhead.sh \
        "$OUT/mon$f" > "$OUT/monitor_file$f.txt" 2>&1
      echo "== FILE=$f"; tail -n 12 "$OUT/monitor_file$f.txt"
      rm -f "$OUT"/mon$f/*.jsonl "$OUT"/mon$f/*.log
    done ;;
esac
