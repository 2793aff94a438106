#!/usr/bin/env bash
# Settings A/B over the network path in one device call: two ranks as processes over loopback
# (P2P and SHM off, CCL_NET=mpt unless a set says otherwise), libccl only, each setting in turn
# per round so drift hits them alike; prints one line per (round, memory, op, set): size:busbw
# out-of-place/in-place, and the #wrong total. Logs under $OUT/net_ab.
#
#   SETS="ring:CCL_ALLREDUCE_EXCHANGE_BYTES=0 xchg:CCL_ALLREDUCE_EXCHANGE_BYTES=1" \
#   MEMS="host device" OPS=all_reduce RANGE="64K 128M" bash tests/gpu/device_net_ab.sh
#
# Env (defaults): SETS ("base:" -- NAME:VAR=value,VAR=value), MEMS ("host device"), OPS
# (all_reduce), RANGE ("64K 128M": -b, -e), FACTOR (4: -f), ROUNDS (2), ARGS ("-n 10 -w 2
# -c 1"), NP (2), CCL_DEV ($PWD/.dev: libnccl.so.2 and ccl-perf), TIMEOUT (240 s a run).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
CCL=${CCL_DEV:-$PWD/.dev}
OUT=${OUT:-/tmp/out}; L=$OUT/net_ab; mkdir -p "$L"
read -r LO HI <<< "${RANGE:-64K 128M}"
for round in $(seq "${ROUNDS:-2}"); do
  for mem in ${MEMS:-host device}; do
    for op in ${OPS:-all_reduce}; do
      for set in ${SETS:-base:}; do
        name=${set%%:*}; vars=${set#*:}
        log=$L/$round.$mem.$op.$name.log
        # shellcheck disable=SC2086
        env CCL_NET=mpt ${vars//,/ } LD_LIBRARY_PATH="$CCL" timeout -s KILL "${TIMEOUT:-240}" \
          mpirun --allow-run-as-root --bind-to none -np "${NP:-2}" \
          $(env CCL_NET=mpt ${vars//,/ } env | grep -oE '^(CCL|NCCL)_[A-Z0-9_]+' | sed 's/^/-x /') \
          -x LD_LIBRARY_PATH "$CCL/ccl-perf" "$op" -b "$LO" -e "$HI" -f "${FACTOR:-4}" \
          ${ARGS:--n 10 -w 2 -c 1} --mem "$mem" > "$log" 2>&1
        grep -E '^ +[0-9]' "$log" | awk -v t="$round $mem $op $name" '
          { w += $9; if ($13 != "N/A") w += $13; printf "%s%s:%s/%s", (n++ ? " " : t ": "), $1, $8, $12 }
          END { printf "  wrong %d%s\n", w, (n ? "" : " (no rows)") }'
      done
    done
  done
done
