#!/usr/bin/env bash
# Settings A/B on the device in one call: NVIDIA NCCL beside libccl under several environments
# ("variants"), one ccl-perf sweep per (mode, op, library or variant), and a table per op of
# libccl's time / NCCL's time at every size for each variant (lower is better), plus #wrong.
#
#   VARIANTS="base: single8m:CCL_IPC_DIRECT_SINGLE_BYTES=8388608 \
#             ll64k:CCL_IPC_LL_EXCHANGE_BYTES=65536" \
#   OPS="all_gather alltoall" RANGE="64K 4M" bash tests/gpu/device_env_ab.sh
#
# Env (defaults):
#   VARIANTS  "base:" -- words NAME:VAR=value,VAR=value (nothing after the colon: defaults)
#   OPS       "all_gather alltoall broadcast"     RANGE  "64K 4M" (-b and -e; -f 2)
#   MODES     "g mpi" (g: one process, -g NGPU; mpi: mpirun -np NGPU)
#   NGPU      nvidia-smi's count (2 when it finds none)
#   ARGS      "-n 50 -w 10 -c 1" (libccl checks its rows; NCCL runs -c 0)
#   TIMEOUT   90 s per run            CCL_DEV  $PWD/.dev
# Writes $OUT/env_ab.md (the tables) and $OUT/env_ab/*.log.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$PWD
NV=${NCCL_BASELINE:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}
CCL=${CCL_DEV:-$ROOT/.dev}
OUT=${OUT:-/tmp/out}; L=$OUT/env_ab; mkdir -p "$L"
if [ -z "${NGPU:-}" ]; then
  NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [ "${NGPU:-0}" -ge 1 ] 2>/dev/null || NGPU=2
fi
VARIANTS=${VARIANTS:-base:}
OPS=${OPS:-all_gather alltoall broadcast}
read -r LO HI <<< "${RANGE:-64K 4M}"
MODES=${MODES:-g mpi}
ARGS=${ARGS:--n 50 -w 10 -c 1}
T=${TIMEOUT:-90}

# run LOG LIBDIR MODE OP ENV-WORDS...: one sweep, "exit RC" appended to LOG.
run() {
  local log=$1 lp=$2 mode=$3 op=$4 args=$ARGS
  shift 4
  [ "$lp" = "$NV" ] && args=${args/-c 1/-c 0}
  local xs=(-x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE)
  local kv
  for kv in "$@"; do xs+=(-x "$kv"); done
  if [ "$mode" = g ]; then
    env LD_LIBRARY_PATH="$lp" "$@" timeout -k 5 "$T" "$CCL/ccl-perf" "$op" -b "$LO" -e "$HI" -f 2 $args -g "$NGPU" > "$log" 2>&1
  else
    env LD_LIBRARY_PATH="$lp" timeout -k 5 "$T" mpirun --allow-run-as-root --bind-to none -np "$NGPU" "${xs[@]}" \
      "$CCL/ccl-perf" "$op" -b "$LO" -e "$HI" -f 2 $args > "$log" 2>&1
  fi
  echo "exit $?" >> "$log"
}

for mode in $MODES; do
  for op in $OPS; do
    run "$L/$mode.$op.nccl.log" "$NV" "$mode" "$op"
    for v in $VARIANTS; do
      name=${v%%:*}
      IFS=, read -r -a envs <<< "${v#*:}"
      run "$L/$mode.$op.$name.log" "$CCL" "$mode" "$op" "${envs[@]}"
    done
    echo "done $mode $op at ${SECONDS}s"
  done
done

python3 - "$L" "$NGPU" "$MODES" "$OPS" "$VARIANTS" > "$OUT/env_ab.md" <<'EOF'
import os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "gpu"))
import issue8_report as r

logdir, ngpu, modes, ops, variants = sys.argv[1:6]
names = [v.split(":", 1)[0] for v in variants.split()]
print(f"# libccl time / NCCL time per size, {ngpu} GPUs (lower is better); variants:")
for v in variants.split():
    name, env = v.split(":", 1)
    print(f"- {name}: {env or '(defaults)'}")
for mode in modes.split():
    for op in ops.split():
        nccl, nrc = r.rows_of(os.path.join(logdir, f"{mode}.{op}.nccl.log"))
        base = {row["size"]: row["time"] for row in nccl or []}
        cols = []
        for name in names:
            rows, rc = r.rows_of(os.path.join(logdir, f"{mode}.{op}.{name}.log"))
            wrong = sum(int(float(x[k])) for x in rows or [] for k in ("wrong_oop", "wrong_ip")
                        if r.is_num(x[k]))
            cols.append((name, {x["size"]: x["time"] for x in rows or []}, rc, wrong))
        print()
        print(f"## {r.mode_label(mode, ngpu)} {op} (NCCL exit {nrc})")
        print()
        print("| size | NCCL us | " + " | ".join(f"{n}" for n, *_ in cols) + " |")
        print("|---|---:|" + "---:|" * len(cols))
        for size in sorted(base):
            cells = []
            for _, times, _, _ in cols:
                t = times.get(size)
                cells.append("-" if t is None or base[size] <= 0 else f"{t / base[size]:.2f}")
            print(f"| {r.size_label(size)} | {base[size]:.1f} | " + " | ".join(cells) + " |")
        print()
        print("exit / #wrong: " + ", ".join(f"{n} {rc}/{w}" for n, _, rc, w in cols))
EOF
cat "$OUT/env_ab.md"
