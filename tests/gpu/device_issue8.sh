#!/usr/bin/env bash
# Issue 8's acceptance on one machine with N GPUs (nvidia-h200-x4, nvidia-h200-x8), libccl beside
# NVIDIA's NCCL, in parts that can go in separate device calls:
#
#   topo         nvidia-smi -L / topo -m / nvlink -s and .dev/ccl-topo (its --help, the text
#                report, --json): how many GPUs libccl sees, its GPU-GPU matrix against
#                nvidia-smi's, and whether every ring uses every GPU
#   correctness  ccl-perf <op> $CORR_ARGS (-b 8 -e 1G -f 4 -c 1) for each op of OPS, as -g N and
#                as mpirun -np N, libccl only: exit status, rows, #wrong (both columns) per run
#   perf         busbw and time at SIZES (8 1M 128M 1G) for each op, NCCL and libccl, -g N and
#                mpirun -np N, $PERF_ARGS (-n 20 -w 5 -c 0): tables of ratios libccl / NCCL and
#                the issue's targets (all_reduce >= 1.00 at 1 GiB; all_gather, alltoall,
#                broadcast, sendrecv >= 1.15 at >= 128 MiB)
#   torch        tests/gpu/torch_check.py under torchrun --nproc-per-node N on NCCL, then on
#                libccl (LD_PRELOAD), compared by torch_compare.py (bitwise with 2 ranks; sums
#                within tolerance with more, data movement bitwise)
#   megatron     (not in the default PARTS; needs .whl carried) tests/megatron/run.sh with
#                NPROC=N CONFIGS=pp2-tp: pipeline parallel 2 x tensor parallel N/2
#
# Run from the repository root, with .dev carried: libnccl.so.2, ccl-perf and ccl-topo
# (cp target/release/ccl-topo .dev/; strip it to keep the carry small). Writes
# $OUT/issue8_summary.md and $OUT/logs.tgz and nothing else under $OUT (KEEP_LOGS=1 leaves
# logs/ unpacked instead).
#
#   PARTS="topo correctness" bash tests/gpu/device_issue8.sh
#   PARTS=perf MODES=g bash tests/gpu/device_issue8.sh
#   PARTS=correctness OPS="all_reduce all_gather reduce_scatter" bash tests/gpu/device_issue8.sh
#
# Env (defaults):
#   NGPU          GPUs / ranks (nvidia-smi -L | wc -l; 2 when that finds none)
#   PARTS         "topo correctness perf torch" (megatron is opt-in)
#   OPS           the nine ops, for correctness and perf
#   MODES         "g mpi": g = one process, ccl-perf -g N; mpi = mpirun -np N, one GPU per rank
#   CORR_ARGS     "-b 8 -e 1G -f 4 -c 1"      CORR_TIMEOUT  240 s per ccl-perf run
#   SIZES         "8 1M 128M 1G"              PERF_ARGS     "-n 20 -w 5 -c 0"
#   PERF_SWEEP    1: one ccl-perf run per (mode, op, library) over -b MIN -e MAX -f 2, the rows at
#                 SIZES picked out (SIZES must then be MIN * 2^k; otherwise, or with 0, one run per
#                 size as tests/gpu/device_perf.sh does)
#                 With "-c 1" in PERF_ARGS (and PERF_SWEEP=1) each libccl sweep is also that
#                 mode's correctness run (logs/corr.<mode>.<op>.log; report under the perf table):
#                 the -f 2 sweep holds every size of CORR_ARGS's -f 4 one, so PARTS=perf alone
#                 covers both points in half the device time
#   PERF_TIMEOUT  120 s per ccl-perf run      TORCH_TIMEOUT 300 s per torchrun
#   MEGATRON_CONFIGS "pp2-tp", MEGATRON_ITERS 100, MEGATRON_ARGS "" (COMPARE_ARGS for compare.py)
#   DEADLINE      540: seconds for the whole script; a step gets at most what is left (less 20 s
#                 for the summary) and is skipped, and listed, when under 30 s would be left
#   NCCL_BASELINE NVIDIA's NCCL folder (/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib)
#   CCL_DEV       folder with libnccl.so.2, ccl-perf, ccl-topo ($PWD/.dev)
#   MPI_ARGS      more mpirun options (none)
# Any CCL_* / NCCL_* variable set when the script starts goes to the mpirun ranks too (-x).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$PWD
NV=${NCCL_BASELINE:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}
CCL=${CCL_DEV:-$ROOT/.dev}
OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"
S=$OUT/issue8_summary.md; : > "$S"
REPORT=$ROOT/tests/gpu/issue8_report.py
if [ -z "${NGPU:-}" ]; then
  NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [ "${NGPU:-0}" -ge 1 ] 2>/dev/null || NGPU=2
fi
export NGPU
PARTS=${PARTS:-topo correctness perf torch}
OPS=${OPS:-all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter}
MODES=${MODES:-g mpi}
CORR_ARGS=${CORR_ARGS:--b 8 -e 1G -f 4 -c 1}
CORR_TIMEOUT=${CORR_TIMEOUT:-240}
SIZES=${SIZES:-8 1M 128M 1G}
PERF_ARGS=${PERF_ARGS:--n 20 -w 5 -c 0}
PERF_SWEEP=${PERF_SWEEP:-1}
PERF_TIMEOUT=${PERF_TIMEOUT:-120}
TORCH_TIMEOUT=${TORCH_TIMEOUT:-300}
DEADLINE=${DEADLINE:-540}
SKIPPED=()

say() { echo "$*" | tee -a "$S"; }
mpi_x=(-x LD_LIBRARY_PATH)
for v in $(compgen -e); do case $v in CCL_*|NCCL_*) mpi_x+=(-x "$v") ;; esac; done

# A killed torchrun or mpirun can leave workers behind (torch starts them in sessions of their
# own): every step's processes carry CCL_ISSUE8_STEP=<tag>, and those left over are killed by pid.
reap() {
  local tag=$1 p pid
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [ "$pid" = $$ ] && continue
    if grep -qz "^CCL_ISSUE8_STEP=$tag\$" "$p/environ" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null && echo "reaped leftover pid $pid of step $tag" >> "$L/reaped.log"
    fi
  done
}

# step TAG TIMEOUT LOG CMD...: CMD under timeout (TERM, then KILL 10 s later), cut to the deadline;
# appends "exit RC" to LOG. Returns RC, or 125 (and writes SKIPPED to LOG) when there is no time.
step() {
  local tag=$1 t=$2 log=$3 left rc
  shift 3
  left=$((DEADLINE - SECONDS - 20))
  if ((left < 30)); then
    echo "SKIPPED (deadline: ${DEADLINE}s for the script)" > "$log"
    SKIPPED+=("$tag")
    return 125
  fi
  ((t > left)) && t=$left
  CCL_ISSUE8_STEP=$tag timeout -k 10 "$t" "$@" > "$log" 2>&1
  rc=$?
  echo "exit $rc" >> "$log"
  reap "$tag"
  return $rc
}

# ccl_perf LIBDIR MODE OP LOG TAG TIMEOUT ARGS...: ccl-perf through that library, as -g N (mode g*)
# or under mpirun -np N.
ccl_perf() {
  local lp=$1 mode=$2 op=$3 log=$4 tag=$5 t=$6
  shift 6
  if [ "${mode#g}" != "$mode" ]; then
    step "$tag" "$t" "$log" env LD_LIBRARY_PATH="$lp" "$CCL/ccl-perf" "$op" "$@" -g "$NGPU"
  else
    step "$tag" "$t" "$log" env LD_LIBRARY_PATH="$lp" mpirun --allow-run-as-root --bind-to none -np "$NGPU" \
      "${mpi_x[@]}" ${MPI_ARGS:-} "$CCL/ccl-perf" "$op" "$@"
  fi
}
# One line about a torchrun log: the library version line and the done line, or the last error.
tbrief() {
  local v d e
  v=$(grep -h -m1 'ncclGetVersion' "$1" | cut -c1-120)
  d=$(grep -h -m1 'done:' "$1" | cut -c1-120)
  if [ -n "$d" ]; then
    echo "$v; $d"
  else
    e=$(grep -hE 'Error|error:|SKIPPED' "$1" | grep -v error_file | tail -n 1 | cut -c1-200)
    echo "${v:+$v; }FAILED: ${e:-see logs/$(basename "$1")}"
  fi
}
mlabel() { if [ "${1#g}" != "$1" ]; then echo "g$NGPU"; else echo "$1"; fi; }

say "# Issue 8 on $NGPU GPUs: $(date -u +%FT%TZ)"
say ""
say "- machine: $(hostname 2>/dev/null), $(nvidia-smi -L 2>/dev/null | grep -c '^GPU') GPU(s): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sort | uniq -c | sed 's/^ *//' | tr '\n' ';')"
say "- libccl: $CCL/libnccl.so.2 ($(stat -L -c '%s bytes, %y' "$CCL/libnccl.so.2" 2>/dev/null || echo MISSING)); NCCL: $NV ($([ -d "$NV" ] && echo present || echo MISSING))"
say "- PARTS=\"$PARTS\" OPS=\"$OPS\" MODES=\"$MODES\" DEADLINE=${DEADLINE}s"
[ -x "$CCL/ccl-perf" ] || say "- WARNING: $CCL/ccl-perf is missing: correctness and perf will fail"

for part in $PARTS; do
  case $part in
  topo)
    say ""
    say "## topo"
    say ""
    nvidia-smi -L > "$L/nvidia-smi-L.txt" 2>&1
    nvidia-smi topo -m > "$L/nvidia-smi-topo.txt" 2>&1
    nvidia-smi --query-gpu=index,pci.bus_id,name --format=csv,noheader > "$L/gpu-busids.csv" 2>&1
    timeout 30 nvidia-smi nvlink -s > "$L/nvidia-smi-nvlink.txt" 2>&1
    TOPO=$CCL/ccl-topo
    if [ -x "$TOPO" ]; then
      timeout 30 "$TOPO" --help > "$L/ccl-topo-help.txt" 2>&1
      step topo_text 90 "$L/ccl-topo.txt" "$TOPO"
      if grep -q -- '--json' "$L/ccl-topo-help.txt"; then
        # stdout only: the JSON document (stderr notes go to a file of their own).
        step topo_json 90 "$L/ccl-topo.stderr" sh -c "'$TOPO' --json > '$L/ccl-topo.json'"
      fi
    else
      say "- $TOPO is missing: copy target/release/ccl-topo into .dev and carry it"
    fi
    python3 "$REPORT" topo "$L" "$NGPU" 2>&1 | tee -a "$S"
    say ""
    say '```'
    sed 's/\x1b\[[0-9;]*m//g' "$L/nvidia-smi-topo.txt" | grep -E '^[[:space:]]*(GPU|NIC)' | cut -c1-200 | head -n 20 | tee -a "$S"
    say '```'
    if [ -s "$L/ccl-topo.txt" ]; then
      say '```'
      grep -v '^exit ' "$L/ccl-topo.txt" | grep -vE '^\s+net[0-9]|^(mlx|eth|eno|ib|lo)' | head -n 45 | cut -c1-200 | tee -a "$S"
      say '```'
    fi
    ;;
  correctness)
    say ""
    say "## correctness: libccl, ccl-perf <op> $CORR_ARGS, N = $NGPU"
    say ""
    for mode in $MODES; do
      m=$(mlabel "$mode")
      for op in $OPS; do
        ccl_perf "$CCL" "$mode" "$op" "$L/corr.$m.$op.log" "corr_${m}_$op" "$CORR_TIMEOUT" $CORR_ARGS
        echo "correctness $m $op: exit $? at ${SECONDS}s"
      done
    done
    python3 "$REPORT" corr "$L" "$NGPU" "$CORR_ARGS" 2>&1 | tee -a "$S"
    ;;
  perf)
    say ""
    say "## perf: NCCL vs libccl, $PERF_ARGS, N = $NGPU"
    say ""
    sweep=$PERF_SWEEP
    range=$(python3 "$REPORT" sizes "$SIZES") || sweep=0
    perf_checks=0
    case " $PERF_ARGS " in *" -c 1 "*) [ "$sweep" = 1 ] && perf_checks=1 ;; esac
    for mode in $MODES; do
      m=$(mlabel "$mode")
      for op in $OPS; do
        for lib in nccl ccl; do
          [ $lib = nccl ] && LP=$NV || LP=$CCL
          if [ "$sweep" = 1 ]; then
            read -r lo hi <<< "$range"
            args=$PERF_ARGS
            # NVIDIA's rows are the baseline only: its check would double the call's time.
            [ $lib = nccl ] && args=${args/-c 1/-c 0}
            ccl_perf "$LP" "$mode" "$op" "$L/perf.$m.$op.$lib.log" "perf_${m}_${op}_$lib" "$PERF_TIMEOUT" \
              -b "$lo" -e "$hi" -f 2 $args
            echo "perf $m $op $lib: exit $? at ${SECONDS}s"
            # With -c 1 the libccl sweep is also a correctness run: every size of the issue's
            # -f 4 sweep is in it, each checked after its timed iterations (timing unaffected).
            [ "$perf_checks" = 1 ] && [ $lib = ccl ] && cp "$L/perf.$m.$op.ccl.log" "$L/corr.$m.$op.log"
          else
            for size in $SIZES; do
              bytes=$(python3 -c "import sys; sys.path.insert(0, '$ROOT/tests/gpu'); import issue8_report as r; print(r.parse_size('$size'))")
              ccl_perf "$LP" "$mode" "$op" "$L/perf.$m.$op.$lib.$bytes.log" "perf_${m}_${op}_${lib}_$bytes" \
                "$PERF_TIMEOUT" -b "$size" -e "$size" $PERF_ARGS
              echo "perf $m $op $lib $size: exit $? at ${SECONDS}s"
            done
          fi
        done
      done
    done
    python3 "$REPORT" perf "$L" "$NGPU" "$SIZES" "$sweep" 2>&1 | tee -a "$S"
    if [ "$perf_checks" = 1 ]; then
      read -r lo hi <<< "$range"
      say ""
      say "## correctness from the perf runs: libccl, ccl-perf <op> -b $lo -e $hi -f 2 $PERF_ARGS, N = $NGPU"
      say ""
      python3 "$REPORT" corr "$L" "$NGPU" "-b $lo -e $hi -f 2 $PERF_ARGS" 2>&1 | tee -a "$S"
    fi
    fails=$(grep -l -E '^exit [1-9]' "$L"/perf.*.log 2>/dev/null | xargs -r -n1 basename | tr '\n' ' ')
    [ -n "$fails" ] && say "perf runs that failed (see logs): $fails"
    ;;
  torch)
    say ""
    say "## torch: tests/gpu/torch_check.py, $NGPU ranks"
    say ""
    # Results go to local disk, never under $OUT (about 0.5 GiB per rank file with 8 ranks).
    TD=$(mktemp -d /tmp/ccl_issue8_torch.XXXXXX)
    export CCL_TORCH_OUT=$TD
    step torch_nccl "$TORCH_TIMEOUT" "$L/torch_nccl.log" python3 -m torch.distributed.run \
      --nproc-per-node "$NGPU" --master-port 29561 tests/gpu/torch_check.py nccl
    rc=$?
    say "- torch nccl: exit $rc; $(tbrief "$L/torch_nccl.log")"
    step torch_ccl "$TORCH_TIMEOUT" "$L/torch_ccl.log" env LD_PRELOAD="$CCL/libnccl.so.2" python3 -m torch.distributed.run \
      --nproc-per-node "$NGPU" --master-port 29562 tests/gpu/torch_check.py ccl
    rc=$?
    say "- torch ccl (LD_PRELOAD): exit $rc; $(tbrief "$L/torch_ccl.log")"
    step torch_compare 240 "$L/torch_compare.log" python3 tests/gpu/torch_compare.py "$TD" nccl ccl "$NGPU"
    rc=$?
    say "- torch_compare: exit $rc"
    say '```'
    grep -E '^torch_compare' "$L/torch_compare.log" | tee -a "$S"
    grep -E 'DIFFERS|Error|SKIPPED' "$L/torch_compare.log" | head -n 12 | tee -a "$S"
    say '```'
    rm -rf "$TD"
    unset CCL_TORCH_OUT
    ;;
  megatron)
    say ""
    say "## megatron: NPROC=$NGPU CONFIGS=${MEGATRON_CONFIGS:-pp2-tp}"
    say ""
    left=$((DEADLINE - SECONDS - 30))
    if ((left < 120)); then
      say "- skipped: ${left}s left"
      SKIPPED+=(megatron)
    else
      CCL_ISSUE8_STEP=megatron OUT=$L NPROC=$NGPU CONFIGS=${MEGATRON_CONFIGS:-pp2-tp} ITERS=${MEGATRON_ITERS:-100} \
        COMPARE_ARGS=${MEGATRON_ARGS:-} DEADLINE=$left LIBCCL=$CCL/libnccl.so.2 \
        timeout -k 10 $((left + 20)) bash tests/megatron/run.sh > "$L/megatron_run.log" 2>&1
      rc=$?
      reap megatron
      say "- run.sh exit $rc"
      say '```'
      sed -n '/^config  /,$p' "$L/megatron_run.log" | grep -v '^\[megatron' | head -n 30 | tee -a "$S"
      say '```'
    fi
    ;;
  *)
    say "unknown part $part (topo correctness perf torch megatron)"
    ;;
  esac
done

say ""
if ((${#SKIPPED[@]})); then
  say "SKIPPED for the deadline (run them in another call, e.g. with OPS=/MODES=/PARTS=): ${SKIPPED[*]}"
fi
say "elapsed ${SECONDS}s"
if [ "${KEEP_LOGS:-0}" != 1 ]; then
  (cd "$OUT" && tar czf logs.tgz logs && rm -rf logs) || echo "tar of the logs failed"
fi
