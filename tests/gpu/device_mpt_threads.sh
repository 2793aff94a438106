#!/usr/bin/env bash
# Issue 6: where the multipath transport's CPU time goes as engines are added. ccl-perf
# sendrecv / all_reduce on host memory (MEM=device: GPU memory, both ranks on one GPU if
# there is only one), two processes over loopback, one run per setting in
# $SETS ("label:VAR=v,VAR=v ..."); for each, the CPU seconds every thread of both ranks spent
# over a 2 s window in the steady state (from /proc, summed by thread name), the busbw, and
# with PROFILE=1 a system-wide cpu-clock profile by thread and shared object (.dev/perf,
# tests/gpu/pack_perf.sh). Logs under $OUT/threads.
set -uo pipefail
OUT=${OUT:-/tmp/out}; L=$OUT/threads; mkdir -p "$L"; CCL=$PWD/.dev
SIZE=${SIZE:-128M}; TCK=$(getconf CLK_TCK)
snap() {  # pids -> "comm ticks" per thread
  for p in "$@"; do for t in /proc/$p/task/*; do
    [ -r $t/stat ] && awk -v c="$(cat $t/comm 2>/dev/null | tr ' ' _)" '{ sub(/^.*\) /, ""); print c, $12 + $13 }' $t/stat
  done; done
}
echo "cpus $(nproc)"
for set in ${SETS:-e1:CCL_MPT_ENGINES=1 e4:CCL_MPT_ENGINES=4 e8:CCL_MPT_ENGINES=8 e8c4:CCL_MPT_ENGINES=8,CCL_COPY_THREADS=4}; do
  label=${set%%:*}; vars=${set#*:}; envs=$(echo "$vars" | tr ',' ' ')
  for op in ${OPS:-sendrecv}; do
    log=$L/$op.$label.log
    env $envs LD_LIBRARY_PATH=$CCL NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt timeout -s KILL 120 \
      mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x NCCL_P2P_DISABLE \
      -x NCCL_SHM_DISABLE -x CCL_NET $(for v in ${vars//,/ }; do echo -n "-x ${v%%=*} "; done) \
      .dev/ccl-perf $op -b $SIZE -e $SIZE -n ${ITERS:-250} -w 3 -c 1 --mem ${MEM:-host} > "$log" 2>&1 &
    sleep 4
    P=$(pgrep -x ccl-perf | tr '\n' ' ')
    snap $P > $L/a; sleep 2; snap $P > $L/b
    if [ "${PROFILE:-0}" = 1 ] && [ -x $CCL/perf/perf ]; then
      LD_LIBRARY_PATH=$CCL/perf/lib $CCL/perf/perf record -a -e cpu-clock -F 999 -o $L/p.data -- sleep 1.5 > /dev/null 2>&1
    fi
    wait
    echo "== $op $label ($vars): $(grep -E '^ +[0-9]' "$log" | tail -n 1 | awk '{print $8 " GB/s busbw, wrong " $9}')"
    # CPU seconds per thread name over the 2 s window (both ranks), and the total.
    awk -v tck=$TCK 'NR == FNR { a[FNR] = $2; next } { d = ($2 - a[FNR]) / tck; s[$1] += d; n[$1]++; tot += d }
      END { for (c in s) if (s[c] > 0.01) printf "   %-16s x%-2d %5.2f CPU-s\n", c, n[c], s[c]; printf "   total %.2f CPU-s in 2 s\n", tot }' $L/a $L/b | sort
    if [ -f $L/p.data ]; then
      LD_LIBRARY_PATH=$CCL/perf/lib $CCL/perf/perf report -i $L/p.data --no-children --stdio --sort comm,dso 2>/dev/null | grep -E "^ +[0-9]" | head -n 10
      LD_LIBRARY_PATH=$CCL/perf/lib $CCL/perf/perf report -i $L/p.data --no-children --stdio --sort comm,dso,symbol 2>/dev/null | grep -E "^ +[0-9]" | head -n 40 | cut -c1-120
      rm -f $L/p.data
    fi
  done
done
