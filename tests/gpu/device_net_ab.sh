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
# -c 1"), NP (2), CCL_DEV ($PWD/.dev: libnccl.so.2 and ccl-perf), TIMEOUT (240 s a run), SHM
# (0; 1: shared memory stays on, only P2P off).
# A set whose name starts with "nccl" runs NVIDIA's NCCL (the torch venv's libnccl.so.2, NV)
# instead of libccl, e.g. "nccl:NCCL_NET=Socket" for its socket transport; with such a set the
# run ends with each (memory, op, size) median busbw ratio of every other set against it.
#
#   ROUNDS=3 MEMS=device OPS="all_reduce sendrecv alltoall" RANGE="128M 128M" \
#   SETS="nccl:NCCL_NET=Socket ccl:" bash tests/gpu/device_net_ab.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1
# SHM=1 keeps shared memory on: NCCL's shared-memory transport against libccl's host-only
# cuda-ipc (both what P2P off alone gives between two GPUs).
[ "${SHM:-0}" = 1 ] || export NCCL_SHM_DISABLE=1
CCL=${CCL_DEV:-$PWD/.dev}
NV=${NV:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}
OUT=${OUT:-/tmp/out}; L=$OUT/net_ab; mkdir -p "$L"
read -r LO HI <<< "${RANGE:-64K 128M}"
for round in $(seq "${ROUNDS:-2}"); do
  for mem in ${MEMS:-host device}; do
    for op in ${OPS:-all_reduce}; do
      for set in ${SETS:-base:}; do
        name=${set%%:*}; vars=${set#*:}
        log=$L/$round.$mem.$op.$name.log
        lib=$CCL; [ "${name#nccl}" != "$name" ] && lib=$NV
        # shellcheck disable=SC2086
        env CCL_NET=mpt ${vars//,/ } LD_LIBRARY_PATH="$lib" timeout -s KILL "${TIMEOUT:-240}" \
          mpirun --allow-run-as-root --bind-to none -np "${NP:-2}" \
          $(env CCL_NET=mpt ${vars//,/ } env | grep -oE '^(CCL|NCCL)_[A-Z0-9_]+' | sed 's/^/-x /') \
          -x LD_LIBRARY_PATH "$CCL/ccl-perf" "$op" -b "$LO" -e "$HI" -f "${FACTOR:-4}" \
          ${ARGS:--n 10 -w 2 -c 1} --mem "$mem" > "$log" 2>&1
        grep -E '^ +[0-9]' "$log" | awk -v t="$round $mem $op $name" '
          { w += $9; if ($13 != "N/A") w += $13; printf "%s%s:%s/%s", (n++ ? " " : t ": "), $1, $8, $12 }
          END { if (!n) printf "%s:", t; printf "  wrong %d%s\n", w, (n ? "" : " (no rows)") }'
      done
    done
  done
done | tee "$L/summary.txt"
# Median ratio of each set against the NCCL set, per (memory, op, size), out of place.
grep -q ' nccl[^ ]*: ' "$L/summary.txt" && awk '
  { split($0, a, ": "); split(a[1], k, " "); mem = k[2]; op = k[3]; set = k[4]
    n = split(a[2], rows, " ")
    for (i = 1; i <= n; i++) if (rows[i] ~ /^[0-9]+:/) {
      split(rows[i], f, "[:/]"); key = mem " " op " " f[1]
      if (set ~ /^nccl/) base[key, k[1]] = f[2]; else { v[key, set, k[1]] = f[2]; sets[set]; keys[key]; rounds[k[1]] }
    } }
  END { for (key in keys) for (s in sets) { m = 0
          for (r in rounds) if (base[key, r] > 0 && (key, s, r) in v) x[++m] = v[key, s, r] / base[key, r]
          if (!m) continue
          for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
          med = m % 2 ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2
          printf "ratio %s %s / nccl: median %.2f over %d rounds (min %.2f, max %.2f)\n", key, s, med, m, x[1], x[m] } }' "$L/summary.txt" | sort
