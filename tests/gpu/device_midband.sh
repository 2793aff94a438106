#!/usr/bin/env bash
# The mid-size band (8 B - 8 MiB) of the copy ops: the one-kernel low-latency exchange
# (CCL_IPC_LL_EXCHANGE_BYTES, CCL_IPC_LL_BYTES) against copy-engine transfers, at several
# thresholds, in one device call, every result checked.
#
#   NGPU=2 tests/gpu/device_midband.sh     nccl-tests under mpirun, NVIDIA NCCL beside libccl
#                                          at each threshold (ratios against NCCL)
#   ONE_GPU=1 tests/gpu/device_midband.sh  one GPU: one process, RANKS (default "2 4") ranks on
#                                          it (mpirun -np 1 ccl-perf -g R); times are not
#                                          NVLink's, only the relative host and kernel cost
#   MPS=1 NGPU=2 NCCL_TESTS_DEVICE=0 LIBS_NCCL= tests/gpu/device_midband.sh
#                                          one GPU, nccl-tests' processes side by side under
#                                          MPS (tests/gpu/mps.sh), libccl only
# LIB (default .dev) holds libccl's libnccl.so.2; SETTINGS lists name=VAR=value,VAR=value
# entries (default below); OPS the operations; MAX the largest size. Summary in $OUT/midband.md,
# with every size's ratio from tools/ccl-report when its binary lies at .dev/ccl-report.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/midband.md; : > "$S"
LIB=${LIB:-.dev}; MAX=${MAX:-8M}
OPS=${OPS:-all_gather alltoall broadcast gather scatter all_reduce reduce_scatter}
SETTINGS=${SETTINGS:-"x4k=CCL_IPC_LL_EXCHANGE_BYTES=4096 x64k=CCL_IPC_LL_EXCHANGE_BYTES=65536 x1m=CCL_IPC_LL_EXCHANGE_BYTES=1048576 x4m=CCL_IPC_LL_EXCHANGE_BYTES=4194304,CCL_IPC_LL_BYTES=4194304"}
source tests/gpu/mps.sh
say() { echo "$*" | tee -a "$S"; }
envs_of() { echo "${1#*=}" | tr ',' ' '; }

if [ "${ONE_GPU:-0}" = 1 ]; then
  for r in ${RANKS:-2 4}; do
    for op in $OPS; do
      for s in $SETTINGS; do
        name=${s%%=*}
        env $(envs_of "$s") timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 1 \
          $(for kv in $(envs_of "$s"); do printf -- '-x %s ' "${kv%%=*}"; done) \
          .dev/ccl-perf "$op" -b 8 -e "$MAX" -f 4 -n 50 -w 10 -c 1 -g "$r" \
          --nccl-lib "$PWD/$LIB/libnccl.so.2" > "$OUT/$op.g$r.$name.log" 2>&1
        echo "$op g$r $name exit $?" >> "$OUT/exits.txt"
      done
      say "## $op, $r ranks on one GPU: time (us) per size, each setting (#wrong in brackets)"
      python3 - "$OUT" "$op" "$r" $(for s in $SETTINGS; do echo "${s%%=*}"; done) <<'PY' | tee -a "$S"
import sys, re
out, op, r, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
rows = {}
for n in names:
    for line in open(f"{out}/{op}.g{r}.{n}.log", errors="replace"):
        f = line.split()
        if len(f) >= 9 and f[0].isdigit() and f[1].isdigit():
            rows.setdefault(int(f[0]), {})[n] = (f[5], f[8])
print("| bytes | " + " | ".join(names) + " |")
print("|---" * (len(names) + 1) + "|")
for b in sorted(rows):
    print(f"| {b} | " + " | ".join(f"{rows[b][n][0]} ({rows[b][n][1]})" if n in rows[b] else "-" for n in names) + " |")
PY
    done
  done
  exit 0
fi

LIBS=${LIBS_NCCL-nccl}; for s in $SETTINGS; do LIBS="$LIBS ${s%%=*}=$LIB"; export "ENVS_${s%%=*}=$(envs_of "$s")"; done
OUT=$OUT/ab LIBS="$LIBS" EXTRA="-b 8 -e $MAX -f 2" OPS="$OPS" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
say "## nccl-tests, $NGPU GPUs, busbw ratio against NVIDIA NCCL, per threshold"
cat "$OUT/ab/nccltests.md" >> "$S"
# Every size: each setting against the first library (NVIDIA NCCL, or the first setting).
if [ -x .dev/ccl-report ]; then
  names=$(for e in $LIBS; do echo "${e%%=*}"; done); base=$(echo "$names" | head -n 1)
  for n in $(echo "$names" | tail -n +2); do
    say "## every size: $n against $base (busbw ratio; time ratio for the latency rows)"
    .dev/ccl-report "$OUT/ab/nccltests" --base "$base" --lib "$n" | tee -a "$S" > /dev/null
  done
fi
