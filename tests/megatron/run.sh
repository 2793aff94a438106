#!/usr/bin/env bash
# Megatron-core GPT training, NVIDIA NCCL vs libccl, on the device machine (2 GPUs by default,
# NPROC=4 or 8 for the larger ones). ONE command:
#
#     bash tests/megatron/run.sh
#
# run from the repository root on the device (shared/DEVICE.md), with `.dev` (libnccl.so.2 from
# scripts/build-lib.sh release) and `.whl` (the megatron-core 0.19.2 wheel, see README.md) carried.
# For each configuration it trains a GPT (8 layers, hidden 2048, seq 1024, micro-batch 8,
# 8 micro-batches, bf16, mock data) for ITERS iterations, first with NVIDIA's NCCL (torch's own),
# then with LD_PRELOAD=$LIBCCL, and prints tests/megatron/compare.py's table: losses bitwise equal
# iteration by iteration, final parameters equal, median iteration time and the ratio ccl/nccl.
#
#   pp2-1f1b         pipeline parallel 2, 1F1B schedule, batch_isend_irecv   (--pp 2 --batch-p2p)
#   pp2-interleaved  pipeline parallel 2, 2 virtual stages, overlap_p2p_comm (--pp 2 --vpp 2 --overlap-p2p)
#   tp2-sp           tensor parallel 2, sequence parallel                    (--tp 2 --sequence-parallel)
#   pp2-tp           pipeline parallel 2 x tensor parallel NPROC/2, sequence parallel, batch_isend_irecv
#                    (--pp 2 --tp $((NPROC/2)) --sequence-parallel --batch-p2p; needs NPROC >= 4, even)
#
# The first three need NPROC=2 (world = tp x pp, no data parallelism); pp2-tp needs NPROC >= 4.
#
# Environment (all optional):
#   NPROC=2              ranks (GPUs) per run: torchrun --nproc-per-node NPROC
#   ITERS=100            iterations per run (shrink it when device time is short)
#   CONFIGS="pp2-1f1b pp2-interleaved tp2-sp"   which configurations, in order (default with
#                        NPROC > 2: "pp2-tp")
#   CCL_ENV=""           VAR=value words for the libccl runs only (e.g. "NCCL_DEBUG=INFO": its
#                        push-wait and byte counts are then printed after each run)
#   CCL_ENV_B=""         the same for a second libccl run "ccl-b" (add it to LIBS), to compare
#                        settings in one call, e.g. CCL_ENV_B="CCL_IPC_PUSH_WAIT_ADAPT=0"
#   CCL_ENV_C=""         and a third, "ccl-c"
#   LIBS="nccl ccl"      which libraries per configuration, in order ("nccl2": NVIDIA NCCL again,
#                        a determinism check of the baseline itself)
#   ROUNDS=1             run every configuration's libraries this many times, interleaved (odd
#                        rounds in LIBS order, even rounds reversed); round r > 1 of library L is
#                        tagged L.r<r>, and compare.py takes the time verdict over the pooled
#                        iterations of all rounds (tp2-sp iterations vary by +-10% run to run)
#   REPEAT_NCCL=""       configurations that also get an "nccl2" run, e.g. REPEAT_NCCL=tp2-sp
#   LIBCCL=$PWD/.dev/libnccl.so.2
#   LIBCCL_B, LIBCCL_C   the library of the "ccl-b" / "ccl-c" runs (default LIBCCL): two builds in
#                        one call, e.g. LIBS="nccl ccl ccl-b" LIBCCL_B=$PWD/.dev/s12/libnccl.so.2
#   DEADLINE=500         seconds for the whole script; runs are cut to fit, and skipped at the end
#   RUN_TIMEOUT          seconds per run (default 60 + 1.5 * ITERS + 10 * (NPROC - 2))
#   EXTRA_ARGS=""        appended to every train_gpt.py command line
#   MEGATRON_PIN_CPUS=1  (train_gpt.py) each rank keeps to its own block of CPUs
#   MEGATRON_ONE_GPU=1   (train_gpt.py) every rank on GPU 0, libccl only (NVIDIA's NCCL refuses
#                        two ranks on one GPU; LIBS="ccl ..."): with MPS (tests/gpu/mps.sh) a
#                        one-GPU machine shows libccl's host costs in a real training loop
#   MICRO_BATCH=8 SEQ=1024  the model's micro-batch and sequence length. At 8 the GPU is the
#                        bottleneck, as in real training, and one library's runs agree to ~0.5%;
#                        MICRO_BATCH=2 (the default before 2026-11-23) is host-bound (the GPU
#                        idles ~70% of a tp2-sp iteration) and its iteration times swing 5-17%
#                        between two runs of the same library (the Python loop's speed)
#   CUDA_DEVICE_MAX_CONNECTIONS=1  as Megatron-LM's launch scripts; set 8 to see whether a hang
#                        comes from one hardware queue serializing the streams
#   OUT                  set by the device tool; logs go to $OUT/megatron/
#   COMPARE_ARGS=""      passed to compare.py (e.g. "--mode tolerance --rtol 1e-3"); by default
#                        losses must be bitwise equal while every reduction group has <= 2 ranks
#                        (all of NPROC=2, pp2-tp at NPROC=4), within 1e-3 relative otherwise
#   MEGATRON_TRACE_DIR   (train_gpt.py) a torch.profiler timeline of iterations
#                        MEGATRON_TRACE_FROM (20) .. +2 per run and rank, gzipped Chrome
#                        traces named <config>.<library>.rank<r>.json.gz; summarize with
#                        tests/megatron/trace_gaps.py
# Exit status: compare.py's (0 = every check passed), 2 when the setup itself failed.

set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
ROOT=$PWD
T0=$SECONDS

OUT=${OUT:-/tmp/megatron-out}
LOGDIR=$OUT/megatron
mkdir -p "$LOGDIR"
NPROC=${NPROC:-2}
ITERS=${ITERS:-100}
if ((NPROC == 2)); then
    CONFIGS=${CONFIGS:-"pp2-1f1b pp2-interleaved tp2-sp"}
else
    CONFIGS=${CONFIGS:-"pp2-tp"}
fi
LIBS=${LIBS:-"nccl ccl"}
CCL_ENV=${CCL_ENV:-}
CCL_ENV_B=${CCL_ENV_B:-}
CCL_ENV_C=${CCL_ENV_C:-}
REPEAT_NCCL=${REPEAT_NCCL:-}
ROUNDS=${ROUNDS:-1}
LIBCCL=${LIBCCL:-$ROOT/.dev/libnccl.so.2}
LIBCCL_B=${LIBCCL_B:-$LIBCCL}
LIBCCL_C=${LIBCCL_C:-$LIBCCL}
DEADLINE=${DEADLINE:-500}
RUN_TIMEOUT=${RUN_TIMEOUT:-$((60 + ITERS * 3 / 2 + 10 * (NPROC - 2)))}
EXTRA_ARGS=${EXTRA_ARGS:-}
COMPARE_ARGS=${COMPARE_ARGS:-}

# NVLink multicast stays off (shared/DEVICE.md); one hardware queue as Megatron-LM runs it;
# reproducible cuBLAS; unbuffered output so a killed run still shows its last lines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}
export CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
export PYTHONUNBUFFERED=1

log() { echo "[megatron $((SECONDS - T0))s] $*"; }

# megatron-core from the carried wheel, into a private target (no index, no dependencies:
# it needs only torch, numpy and packaging, which the image has).
shopt -s nullglob
wheels=("$ROOT"/.whl/megatron_core-*.whl)
shopt -u nullglob
if ((${#wheels[@]} == 0)); then
    log "no megatron_core wheel in .whl/ (see tests/megatron/README.md); carry .whl"
    exit 2
fi
rm -rf /tmp/site
if ! python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}"; then
    log "pip could not install ${wheels[*]}"
    exit 2
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
if ! python3 -c "import megatron.core as m; print('megatron-core', m.__version__)"; then
    log "megatron.core does not import"
    exit 2
fi
if [[ " $LIBS " == *" ccl "* && ! -f $LIBCCL ]]; then
    log "libccl not found at $LIBCCL (build with scripts/build-lib.sh release, copy to .dev/, carry .dev)"
    exit 2
fi
{
    echo "date: $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>/dev/null
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
    echo "libccl: $LIBCCL ($(stat -c %s "$LIBCCL" 2>/dev/null || echo missing) bytes)"
    echo "NPROC=$NPROC ITERS=$ITERS CONFIGS=$CONFIGS LIBS=$LIBS ROUNDS=$ROUNDS MICRO_BATCH=${MICRO_BATCH:-8} SEQ=${SEQ:-1024} REPEAT_NCCL=$REPEAT_NCCL CUDA_DEVICE_MAX_CONNECTIONS=$CUDA_DEVICE_MAX_CONNECTIONS"
} | tee "$LOGDIR/summary.txt"

cfg_args() {
    case $1 in
        pp2-1f1b) echo "--pp 2 --batch-p2p" ;;
        pp2-interleaved) echo "--pp 2 --vpp 2 --overlap-p2p" ;;
        tp2-sp) echo "--tp 2 --sequence-parallel" ;;
        pp2-tp)
            ((NPROC >= 4 && NPROC % 2 == 0)) || return 1
            echo "--pp 2 --tp $((NPROC / 2)) --sequence-parallel --batch-p2p"
            ;;
        *) return 1 ;;
    esac
}
MODEL="--iters $ITERS --layers 8 --hidden 2048 --heads 16 --seq ${SEQ:-1024} --micro-batch ${MICRO_BATCH:-8} --num-micro 8 --vocab 32000"

# The GPUs' clocks and power over a run, sampled every 250 ms in the background: runs of one
# configuration moved 10-25% between calls and within one (NVIDIA NCCL 306.9 then 362.8 ms,
# 2026-12-01), so each run's line says whether its GPUs ran slower.
smi_start() { # file
    nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
        --format=csv,noheader,nounits -lms 250 >"$1" 2>/dev/null &
    SMI_PID=$!
}
smi_stop() { # file -> "sm MHz mean (min), W mean, C max, share of samples held by a limit"
    kill "$SMI_PID" 2>/dev/null; wait "$SMI_PID" 2>/dev/null
    python3 - "$1" <<'PY'
import sys
rows = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    try:
        rows.append((float(f[1]), float(f[2]), float(f[3]), int(f[4], 16)))
    except (IndexError, ValueError):
        pass
busy = [r for r in rows if r[1] > 150] or rows  # the training part, not start-up
if busy:
    sm = [r[0] for r in busy]
    # Limits that slow the clock: power and thermal caps (software and hardware), not idle.
    held = sum(1 for r in busy if r[3] & 0xEC)
    print("gpus: sm %.0f MHz mean (min %.0f), %.0f W mean, %.0f C max, %d%% of samples at a limit"
          % (sum(sm) / len(sm), min(sm), sum(r[1] for r in busy) / len(busy),
             max(r[2] for r in busy), 100 * held // len(busy)))
PY
}

run_one() { # config library
    local cfg=$1 lib=$2 log=$LOGDIR/$1.$2.log args rc t0 left t
    args=$(cfg_args "$cfg") || { log "unknown configuration $cfg (or not for NPROC=$NPROC)"; return; }
    left=$((DEADLINE - (SECONDS - T0) - 20))
    t=$RUN_TIMEOUT
    ((left < t)) && t=$left
    if ((t < 40)); then
        log "$cfg/$lib skipped: DEADLINE=${DEADLINE}s reached"
        echo "{\"tag\": \"$cfg/$lib\", \"event\": \"skipped\", \"reason\": \"deadline\"}" >"$log"
        return
    fi
    log "$cfg/$lib: train_gpt.py $args (timeout ${t}s)"
    t0=$SECONDS
    # (the samples stay out of $OUT: the device returns a limited number of files)
    smi_start "/tmp/megatron-smi.$$"
    # timeout signals its whole process group: torchrun and every worker.
    local kind=${lib%.r[0-9]*}
    if [[ $kind == ccl || $kind == ccl-b || $kind == ccl-c ]]; then
        local extra=$CCL_ENV lib_so=$LIBCCL
        [[ $kind == ccl-b ]] && extra=$CCL_ENV_B && lib_so=$LIBCCL_B
        [[ $kind == ccl-c ]] && extra=$CCL_ENV_C && lib_so=$LIBCCL_C
        # shellcheck disable=SC2086 # word splitting of VAR=value lists is intended
        env $extra LD_PRELOAD=$lib_so timeout -k 10 "$t" python3 -m torch.distributed.run \
            --standalone --nproc-per-node "$NPROC" tests/megatron/train_gpt.py $args $MODEL \
            $EXTRA_ARGS --tag "$cfg/$lib" >"$log" 2>&1
        rc=$?
        # libccl's own account of the run (NCCL_DEBUG=INFO in CCL_ENV): push waits, bytes, host
        # time spent queueing. The status is the run's, taken above: under pipefail a grep
        # that finds nothing fails.
        grep -ho "rank [0-9]*: [0-9]* sends posted before their receives.*\|rank [0-9]*: cuda-ipc sent.*\|rank [0-9]*: cuda-ipc queued.*\|rank [0-9]*: direct reductions:.*" \
            "$log" | sort | uniq -c | sort -rn | head -n 12 | sed "s|^|[megatron] $cfg/$lib: |"
    else
        timeout -k 10 "$t" python3 -m torch.distributed.run --standalone \
            --nproc-per-node "$NPROC" tests/megatron/train_gpt.py $args $MODEL $EXTRA_ARGS \
            --tag "$cfg/$lib" >"$log" 2>&1
        rc=$?
    fi
    echo "{\"tag\": \"$cfg/$lib\", \"event\": \"exit\", \"rc\": $rc, \"wall_s\": $((SECONDS - t0))}" >>"$log"
    local gpus
    gpus=$(smi_stop "/tmp/megatron-smi.$$")
    rm -f "/tmp/megatron-smi.$$"
    [[ -n $gpus ]] && log "$cfg/$lib: $gpus"
    local summary
    summary=$(grep -o '{"tag": "[^"]*", "event": "summary"[^}]*}' "$log" | tail -1)
    if [[ -n $summary ]]; then
        log "$cfg/$lib: rc=$rc in $((SECONDS - t0))s; $(python3 -c 'import json,sys; s=json.loads(sys.argv[1]); print("median %s ms, loss %.4f -> %.4f, %s" % (s["median_ms"], s["first_loss"], s["last_loss"], s["nccl_path"]))' "$summary")"
    else
        log "$cfg/$lib: rc=$rc in $((SECONDS - t0))s, no summary; last lines:"
        grep -v '^{"tag"' "$log" | grep -v -i warn | tail -8 | sed 's/^/    /'
    fi
}

for ((round = 1; round <= ROUNDS; round++)); do
    for cfg in $CONFIGS; do
        libs=$LIBS
        [[ " $REPEAT_NCCL " == *" $cfg "* ]] && libs="$libs nccl2"
        # Even rounds in reverse, so that a drift over the call does not favour one library.
        ((round % 2 == 0)) && libs=$(echo "$libs" | tr ' ' '\n' | tac | tr '\n' ' ')
        for lib in $libs; do
            if ((round == 1)); then run_one "$cfg" "$lib"; else run_one "$cfg" "$lib.r$round"; fi
        done
    done
done

log "compare"
python3 tests/megatron/compare.py --dir "$LOGDIR" $COMPARE_ARGS | tee -a "$LOGDIR/summary.txt"
rc=${PIPESTATUS[0]}

# At most 8 files come back from the device: pack the logs when there are more.
shopt -s nullglob
logs=("$LOGDIR"/*.log)
shopt -u nullglob
if ((${#logs[@]} > 7)); then
    tar -C "$LOGDIR" -czf "$LOGDIR/logs.tar.gz" "${logs[@]##*/}" && rm -f "${logs[@]}"
fi
log "done in $((SECONDS - T0))s; logs in $LOGDIR"
exit "$rc"
