#!/usr/bin/env bash
# Issue 6: run-to-run spread of the multipath transport on a loaded host. ccl-perf $OP at
# $SIZE, two processes over loopback, the settings of $SETS ("label:VAR=v,VAR=v ...")
# alternated $REPEAT times; for each run the busbw, the kernel's UDP receive-buffer drops
# (/proc/net/snmp RcvbufErrors, over the run) and the transport's own loss recovery summed over
# every engine of both ranks (NCCL_DEBUG=INFO prints each link's counters when it closes).
# CCL: the folder holding the libnccl.so.2 to run (default .dev).
# Logs under $OUT/variance.
set -uo pipefail
OP=${OP:-sendrecv}; OUT=${OUT:-/tmp/out}; L=$OUT/variance; mkdir -p "$L"; CCL=${CCL:-$PWD/.dev}
udp_drops() { awk '/^Udp:/ { if (!h) { for (i = 1; i <= NF; i++) n[$i] = i; h = 1 } else print $n["RcvbufErrors"] }' /proc/net/snmp; }
sum() { grep -o "$1: [0-9]*" "$2" | awk '{ s += $2 } END { print s + 0 }'; }
echo "cpus $(nproc)"
for r in $(seq ${REPEAT:-3}); do
  for set in ${SETS:-default:CCL_MPT_PLACE_RECEIVES=auto}; do
    label=${set%%:*}; vars=${set#*:}; envs=$(echo "$vars" | tr ',' ' ')
    log=$L/$OP.$label.$r.$(basename $CCL).log; d0=$(udp_drops)
    env $envs NCCL_DEBUG=INFO LD_LIBRARY_PATH=$CCL NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt \
      timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_DEBUG -x LD_LIBRARY_PATH \
      -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x CCL_NET $(for v in ${vars//,/ }; do echo -n "-x ${v%%=*} "; done) \
      .dev/ccl-perf $OP -b ${SIZE:-128M} -e ${SIZE:-128M} -n ${ITERS:-100} -w 3 -c 1 --mem ${MEM:-host} > "$log" 2>&1
    d1=$(udp_drops)
    printf "%-10s run %d: %s GB/s busbw (wrong %s); rcvbuf drops %d; retransmitted %d, fast %d, rto %d (%d chunks), probes %d, refused %d; spurious timeouts %d\n" \
      "$label" $r "$(grep -E '^ +[0-9]' "$log" | tail -n 1 | awk '{print $8}')" \
      "$(grep -E '^ +[0-9]' "$log" | tail -n 1 | awk '{print $9}')" $((d1 - d0)) \
      $(sum chunks_retransmitted $log) $(sum fast_retransmits $log) $(sum rto_events $log) \
      $(sum rto_chunks $log) $(sum probes_sent $log) $(sum send_refused $log) $(sum spurious_timeouts $log)
  done
done
