#!/usr/bin/env bash
# Where the host time of overlap.py's send/receive loop goes beside the GEMM thread (issue 5,
# measured 2026-11-23): OVERLAP_HOST_TIMES=1 (per-call host times of each loop, and how late a third
# Python thread wakes from 100 us sleeps), sendrecv only, NVIDIA NCCL and libccl, then libccl
# with settings given as VARIANTS ("label:VAR=v,VAR2=v ...", a label starting with nccl runs NVIDIA NCCL). Needs .dev/libnccl.so.2.
# SKIP_BASE=1: the variants only. Writes $OUT/overlap-host.txt.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=$OUT/overlap-host.txt; : > "$R"
CCL=$PWD/.dev
export NCCL_NVLS_ENABLE=0 OVERLAP_HOST_TIMES=1 OVERLAP_COLLS=${OVERLAP_COLLS:-sendrecv}
port=29600
run() {  # run LABEL LIB(nccl|ccl) [VAR=v ...]
  local label=$1 lib=$2; shift 2
  port=$((port + 1))
  local pre=()
  [ "$lib" = ccl ] && pre=(LD_PRELOAD=$CCL/libnccl.so.2 NCCL_DEBUG=INFO)
  echo "### $label ($lib $*)" >> "$R"
  env "${pre[@]}" "$@" timeout -s KILL 120 python3 -m torch.distributed.run --nproc-per-node 2 \
    --master-port $port tests/gpu/overlap.py "$label" > "$OUT/$label.log" 2>&1
  echo "exit $?" >> "$R"
  grep -E "^OVERLAP |host us per call|host us over the run|busbw .* -> |cuda-ipc queued|sends posted before" "$OUT/$label.log" \
    | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-600 >> "$R"
  pkill -KILL -f tests/gpu/overlap.py 2>/dev/null; sleep 1
}
if [ "${SKIP_BASE:-0}" != 1 ]; then
  run nccl nccl
  run ccl ccl
fi
for v in ${VARIANTS:-}; do
  label=${v%%:*}; vars=${v#*:}
  lib=ccl; case $label in nccl*) lib=nccl ;; esac
  run "$label" $lib ${vars//,/ }
done
cat "$R"
