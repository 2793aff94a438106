#!/usr/bin/env bash
# One device call for the SM-free P2P work, from the repo root: a GEMM beside 256 MiB
# sendrecv/alltoall/all_gather loops (tests/gpu/overlap.py) and a two-stage 1F1B pipeline
# (tests/gpu/pp_1f1b.py), each under PyTorch with NVIDIA NCCL (plain) and with libccl
# (LD_PRELOAD=$PWD/.dev/libnccl.so.2), then the 1F1B losses compared bit for bit. With NCU=1
# and ncu present, `ncu --print-summary per-kernel` over .dev/ccl-perf (libccl) for six ops
# lists every kernel launched (libccl's NVRTC kernels are named ccl_*).
# Writes $OUT/p2p_summary.md and $OUT/logs.tgz (logs/ and the JSON results; KEEP_LOGS=1 keeps
# the folders as they are). Env: NGPU (ranks, default 2: overlap.py runs its sendrecv round a
# ring and pp_1f1b.py makes one pipeline stage per rank, so both take any N; the ncu pass uses
# -g N), SKIP_OVERLAP=1, SKIP_PP=1, NCU=1, OVERLAP_ONE_THREAD=1 (the overlap runs again with
# one host thread queueing both loops, a second table), OVERLAP_*, PP_* (passed on; OVERLAP_TRACE=1: a CUPTI
# trace of each step's overlapped loops, summarized by tests/megatron/trace_gaps.py), CCL_ENV_B="VAR=value ..."
# (a second libccl run, label cclb, with those settings, e.g. CCL_IPC_LOCAL_COPY_LANES=4
# CCL_IPC_RX_LANES=4 or CCL_IPC_WAIT_KERNEL=1; its figures follow the table).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"
export CCL_BENCH_OUT=$OUT/bench; mkdir -p "$CCL_BENCH_OUT"
S=$OUT/p2p_summary.md; : > "$S"
NGPU=${NGPU:-2}
say() { echo "$*" | tee -a "$S"; }

say "# P2P / overlap run $(date -u +%FT%TZ)"
[ -f "$CCL/libnccl.so.2" ] || say "WARNING: $CCL/libnccl.so.2 is missing: every libccl step will fail"
[ -d "$NV" ] || say "WARNING: NVIDIA NCCL folder $NV is missing"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader > "$L/gpus.txt" 2>&1 || true

# A killed torchrun leaves its workers running (torch starts them in sessions of their own), so
# after each step its leftovers are found by a tag in their environment and killed by pid.
reap() {
  local tag=$1 p pid
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [ "$pid" = $$ ] && continue
    if grep -qz "^CCL_P2P_STEP=$tag\$" "$p/environ" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null && echo "reaped leftover pid $pid of step $tag" | tee -a "$L/reaped.log"
    fi
  done
}

# torch_step TAG PORT LIB(nccl|ccl) SCRIPT LABEL: one torchrun under timeout -s KILL 120.
torch_step() {
  local tag=$1 port=$2 lib=$3 script=$4 label=$5 rc
  local log=$L/$tag.log
  # OVERLAP_TRACE=1: overlap.py writes a CUPTI trace per rank of OVERLAP_TRACE_COLLS here.
  if [ "${OVERLAP_TRACE:-0}" = 1 ]; then export OVERLAP_TRACE_DIR=$L/trace_$tag; else unset OVERLAP_TRACE_DIR; fi
  # libccl runs at NCCL_DEBUG=INFO: it logs its queueing times and push waits only when the
  # communicator goes, and those lines are copied into the summary.
  if [ "$lib" = cclb ]; then
    env NCCL_DEBUG=INFO $CCL_ENV_B CCL_P2P_STEP=$tag LD_PRELOAD=$CCL/libnccl.so.2 timeout -s KILL 120 python3 -m torch.distributed.run \
      --nproc-per-node "$NGPU" --master-port "$port" "$script" "$label" > "$log" 2>&1
  elif [ "$lib" = ccl ]; then
    NCCL_DEBUG=INFO CCL_P2P_STEP=$tag LD_PRELOAD=$CCL/libnccl.so.2 timeout -s KILL 120 python3 -m torch.distributed.run \
      --nproc-per-node "$NGPU" --master-port "$port" "$script" "$label" > "$log" 2>&1
  else
    CCL_P2P_STEP=$tag timeout -s KILL 120 python3 -m torch.distributed.run \
      --nproc-per-node "$NGPU" --master-port "$port" "$script" "$label" > "$log" 2>&1
  fi
  rc=$?
  echo "exit $rc" >> "$log"
  reap "$tag"
  case $rc in
    0) say "step $tag: ok" ;;
    124|137) say "step $tag: TIMED OUT after 120 s (exit $rc), see logs/$tag.log" ;;
    *) say "step $tag: FAILED (exit $rc), see logs/$tag.log: $(grep -E 'Error|ERROR|error' "$log" | head -n 1 | cut -c1-200)" ;;
  esac
  grep -E '^(OVERLAP|PP1F1B) ' "$log" | tee -a "$L/results.txt"
  grep -hE 'cuda-ipc (queued|sent)|sends posted before their receives|direct reductions:' "$log" \
    | sed "s/^/$tag: /" | cut -c1-400 >> "$L/ccl_stats.txt"
}

if [ "${SKIP_OVERLAP:-0}" != 1 ]; then
  torch_step overlap_nccl 29531 nccl tests/gpu/overlap.py nccl
  torch_step overlap_ccl 29532 ccl tests/gpu/overlap.py ccl
  [ -n "${CCL_ENV_B:-}" ] && torch_step overlap_cclb 29535 cclb tests/gpu/overlap.py cclb
  # OVERLAP_ONE_THREAD=1: both libraries again with one host thread queueing both loops
  # (OVERLAP_ENQUEUE=interleave, as a training step does); with two threads the collective
  # thread stalls about one GEMM in 1 call of 5-10 (2026-11-23), which caps a faster library.
  if [ "${OVERLAP_ONE_THREAD:-0}" = 1 ]; then
    (export OVERLAP_ENQUEUE=interleave; torch_step overlap_nccl_1t 29537 nccl tests/gpu/overlap.py nccl_1t)
    (export OVERLAP_ENQUEUE=interleave; torch_step overlap_ccl_1t 29538 ccl tests/gpu/overlap.py ccl_1t)
  fi
fi
if [ "${SKIP_PP:-0}" != 1 ]; then
  torch_step pp_nccl 29533 nccl tests/gpu/pp_1f1b.py nccl
  torch_step pp_ccl 29534 ccl tests/gpu/pp_1f1b.py ccl
  [ -n "${CCL_ENV_B:-}" ] && torch_step pp_cclb 29536 cclb tests/gpu/pp_1f1b.py cclb
  python3 tests/gpu/pp_1f1b.py --compare "$CCL_BENCH_OUT" nccl ccl > "$L/pp_compare.log" 2>&1
  echo "exit $?" >> "$L/pp_compare.log"
fi

python3 - "$CCL_BENCH_OUT" "${SKIP_OVERLAP:-0}" "${SKIP_PP:-0}" "$NGPU" <<'PY' 2>&1 | tee -a "$S"
import json, math, os, sys
d, skip_ov, skip_pp, nstages = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1", sys.argv[4]
def load(name):
    try:
        with open(os.path.join(d, name)) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"(no {name}: {e})")
        return None
def f(x, p=1):
    return f"{x:.{p}f}" if isinstance(x, (int, float)) and math.isfinite(x) else "-"
def ratio(a, b):
    return f"{a / b:.2f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b and math.isfinite(a) and math.isfinite(b) else "-"
modes = [("", "two threads")]
if os.path.exists(os.path.join(d, "overlap_nccl_1t.json")) or os.path.exists(os.path.join(d, "overlap_ccl_1t.json")):
    modes.append(("_1t", "one thread"))
for suffix, mode in ([] if skip_ov else modes):
    n, c = load(f"overlap_nccl{suffix}.json"), load(f"overlap_ccl{suffix}.json")
    print()
    print(f"## GEMM beside a collective loop, {mode} (rank 0; NCCL {n and n.get('nccl_version')}, libccl {c and c.get('nccl_version')})")
    print()
    print("| collective | GEMM slowdown NCCL % | GEMM slowdown libccl % | busbw alone NCCL | busbw alone libccl "
          "| busbw overlapped NCCL | busbw overlapped libccl | overlapped ratio libccl/NCCL "
          "| coll slowdown NCCL % | coll slowdown libccl % |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    colls = []
    for doc in (n, c):
        for k in (doc or {}).get("results", {}):
            if k not in colls:
                colls.append(k)
    for k in colls:
        rn = (n or {}).get("results", {}).get(k, {})
        rc = (c or {}).get("results", {}).get(k, {})
        g = lambda r, key: r.get(key, float("nan"))
        print(f"| {k} | {f(g(rn, 'gemm_slowdown_pct'))} | {f(g(rc, 'gemm_slowdown_pct'))} "
              f"| {f(g(rn, 'coll_alone_busbw'))} | {f(g(rc, 'coll_alone_busbw'))} "
              f"| {f(g(rn, 'coll_overlap_busbw'))} | {f(g(rc, 'coll_overlap_busbw'))} "
              f"| {ratio(g(rc, 'coll_overlap_busbw'), g(rn, 'coll_overlap_busbw'))} "
              f"| {f(g(rn, 'coll_slowdown_pct'))} | {f(g(rc, 'coll_slowdown_pct'))} |")
    if not colls:
        print("| (no results) | - | - | - | - | - | - | - | - | - |")
    for doc, lib in ((n, "NCCL"), (c, "libccl")):
        if doc and doc.get("failed"):
            print(f"{lib}: failed collectives: {', '.join(doc['failed'])}")
    print("busbw in GB/s (nccl-tests formulas); GEMM alone ms: " + ", ".join(
        f"{k} {f((n or {}).get('results', {}).get(k, {}).get('gemm_alone_ms', float('nan')), 3)}/"
        f"{f((c or {}).get('results', {}).get(k, {}).get('gemm_alone_ms', float('nan')), 3)}" for k in colls)
        + " (NCCL/libccl)")
if not skip_pp:
    n, c = load("pp_nccl.json"), load("pp_ccl.json")
    print()
    print(f"## 1F1B pipeline, {nstages} stages (batch_isend_irecv)")
    print()
    print("| lib | median ms | mean ms |")
    print("|---|---:|---:|")
    for doc, lib in ((n, "NCCL"), (c, "libccl")):
        print(f"| {lib} | {f((doc or {}).get('median_ms'), 2)} | {f((doc or {}).get('mean_ms'), 2)} |")
    print()
    mn, mc = (n or {}).get("median_ms"), (c or {}).get("median_ms")
    print(f"median ratio libccl/NCCL: {ratio(mc, mn)}")
    if n and c:
        eq = bool(n.get("losses")) and n.get("losses") == c.get("losses")
        print(f"losses bitwise equal: {'yes' if eq else 'no'} ({len(n.get('losses', []))} iterations)")
    else:
        print("losses bitwise equal: unknown (a run left no JSON)")
PY

if [ -n "${CCL_ENV_B:-}" ]; then
  say ""
  say "## libccl with $CCL_ENV_B (label cclb)"
  python3 - "$CCL_BENCH_OUT" <<'PY' 2>&1 | tee -a "$S"
import json, os, sys
d = sys.argv[1]
for name in ("overlap_cclb.json", "pp_cclb.json"):
    try:
        doc = json.load(open(os.path.join(d, name)))
    except (OSError, ValueError) as e:
        print(f"(no {name}: {e})"); continue
    if "results" in doc:
        for k, r in doc["results"].items():
            print(f"{k}: GEMM slowdown {r.get('gemm_slowdown_pct', float('nan')):.1f} %, busbw alone "
                  f"{r.get('coll_alone_busbw', float('nan')):.1f}, beside the GEMM {r.get('coll_overlap_busbw', float('nan')):.1f}")
    if "median_ms" in doc:
        print(f"1F1B median {doc['median_ms']:.2f} ms, mean {doc.get('mean_ms', float('nan')):.2f} ms")
PY
fi
if [ -s "$L/pp_compare.log" ]; then
  say ""
  grep -v '^exit ' "$L/pp_compare.log" | tee -a "$S"
fi
if [ -s "$L/results.txt" ]; then
  say ""
  say "Raw result lines:"
  say '```'
  cat "$L/results.txt" | tee -a "$S"
  say '```'
fi
for t in "$L"/trace_*/*.json.gz; do
  [ -f "$t" ] || continue
  say ""
  say "trace_gaps ${t#$L/}:"
  say '```'
  python3 tests/megatron/trace_gaps.py "$t" 2>&1 | head -n 40 | tee -a "$S"
  say '```'
done
if [ -s "$L/ccl_stats.txt" ]; then
  say ""
  say "libccl's own account (NCCL_DEBUG=INFO, per rank, for the whole run of each step):"
  say '```'
  cat "$L/ccl_stats.txt" | tee -a "$S"
  say '```'
fi

NCU_BIN=$(command -v ncu 2>/dev/null || true)
[ -z "$NCU_BIN" ] && [ -x /usr/local/cuda/bin/ncu ] && NCU_BIN=/usr/local/cuda/bin/ncu
if [ "${NCU:-0}" = 1 ]; then
  if [ -z "$NCU_BIN" ]; then
    say "ncu: not found, kernel count skipped"
  elif [ ! -x .dev/ccl-perf ]; then
    say "ncu: .dev/ccl-perf missing, kernel count skipped"
  else
    say ""
    say "## Kernels launched under libccl (ncu --print-summary per-kernel, ccl-perf -b 8 -e 128M -f 32 -g $NGPU)"
    say ""
    say "| op | ncu exit | kernel names | libccl (ccl_) kernels | names seen |"
    say "|---|---:|---:|---:|---|"
    for op in sendrecv alltoall all_gather broadcast gather scatter; do
      log=$L/ncu.$op.log
      CCL_P2P_STEP=ncu_$op LD_LIBRARY_PATH=$CCL timeout -s KILL 60 "$NCU_BIN" --print-summary per-kernel \
        --target-processes all .dev/ccl-perf $op -b 8 -e 128M -f 32 -n 2 -w 1 -c 0 -g $NGPU > "$log" 2>&1
      rc=$?
      echo "exit $rc" >> "$log"
      reap "ncu_$op"
      python3 - "$log" "$op" "$rc" <<'PY' | tee -a "$S"
import re, sys
log, op, rc = sys.argv[1], sys.argv[2], sys.argv[3]
names = []
grid = re.compile(r"^\s*(\S.*?)\s+\(\d+,\s*\d+,\s*\d+\)x\(\d+,\s*\d+,\s*\d+\)")
prof = re.compile(r'==PROF== Profiling "(.+?)"')
for line in open(log, errors="replace"):
    m = prof.search(line) or (None if line.startswith("==") else grid.match(line))
    if m and m.group(1) not in names:
        names.append(m.group(1))
ccl = [x for x in names if "ccl_" in x]
note = " (timed out)" if rc in ("124", "137") else ""
print(f"| {op} | {rc}{note} | {len(names)} | {len(ccl)} | {', '.join(names) if names else 'none'} |")
PY
    done
  fi
fi

if [ "${KEEP_LOGS:-0}" != 1 ]; then
  (cd "$OUT" && tar czf logs.tgz logs bench && rm -rf logs bench) || echo "tar of the logs failed"
fi
