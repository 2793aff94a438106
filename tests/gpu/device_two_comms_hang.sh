#!/usr/bin/env bash
# Where tests/gpu/two_comms.c hangs with all four ranks on one GPU (2026-11-23: ~1 run in 3 at
# 200 iterations). RUNS runs of ITERS iterations; a run still going after LIMIT_S seconds is
# killed and counted as hung (the device machine has no gdb). Also runs the driver probe
# module_load_probe.cu under both loading modes. Output under $OUT (or /tmp/hang).
set -u
OUT=${OUT:-/tmp/hang}; mkdir -p "$OUT"
RUNS=${RUNS:-6}; ITERS=${ITERS:-200}; LIMIT_S=${LIMIT_S:-25}
CCL=${CCL:-$PWD/.dev}
export NCCL_NVLS_ENABLE=0
if [ "${PROBE:-1}" = 1 ]; then
  nvcc -cubin -arch=sm_90 -o /tmp/probe_k.cubin tests/gpu/module_load_probe_k.cu &&
  nvcc -O2 -arch=sm_90 -o /tmp/load_probe tests/gpu/module_load_probe.cu -lcuda -lpthread &&
  for m in LAZY EAGER; do CUDA_MODULE_LOADING=$m timeout 60 /tmp/load_probe /tmp/probe_k.cubin; done 2>&1 | tee "$OUT/probe.txt"
fi
gcc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/two_comms.c -L "$CCL" \
  -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
  -lcudart -lpthread -o /tmp/two_comms || exit 1
hung=0
for k in $(seq 1 "$RUNS"); do
  start=$(date +%s%N)
  TWO_COMMS_ONE_GPU=1 TWO_COMMS_TIMEOUT_S=300 NCCL_DEBUG=${NCCL_DEBUG:-WARN} \
    stdbuf -oL -eL /tmp/two_comms "$ITERS" > "$OUT/${TAG:-}run_$k.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 $((LIMIT_S * 10))); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $pid 2>/dev/null; then
    hung=$((hung + 1))
    echo "run $k: still running after ${LIMIT_S} s -- killed"
    kill -9 $pid; wait $pid 2>/dev/null
  else
    wait $pid; rc=$?
    echo "run $k: exit $rc in $((($(date +%s%N) - start) / 1000000)) ms: $(grep -c PASS "$OUT/${TAG:-}run_$k.log") PASS lines, $(grep -c FAIL "$OUT/${TAG:-}run_$k.log") FAIL"
  fi
done
echo "hung: $hung of $RUNS"
