#!/usr/bin/env bash
# nvidia-h200 (one GPU), carry .dev: abort with the pending operation on the low-latency
# kernels (which spin on the GPU), each in the default setting and with
# CUDA_DEVICE_MAX_CONNECTIONS=1; then four ranks as two emulated hosts (CCL_HOSTID), every
# all-reduce size checked, with the ranks' cards carrying their GPU's bus id. Summary in
# $OUT/summary.md.
set -u
OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"; S=$OUT/summary.md; : > "$S"
export ONE_GPU=1 NCCL_NVLS_ENABLE=0
gcc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/abort_recovers.c -L .dev \
  -Wl,-rpath,$PWD/.dev -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
  -lcudart -lpthread -o /tmp/abort_recovers > "$L/build.log" 2>&1 || echo "build failed" | tee -a "$S"
for conn in "" 1; do
  [ -n "${SKIP_ABORT:-}" ] && break
  for v in "ABORT_NONE=1" "ABORT_COUNT=16384" "ABORT_OP=all_gather ABORT_COUNT=4096"; do
    echo "== $v${conn:+ CUDA_DEVICE_MAX_CONNECTIONS=$conn}" | tee -a "$S"
    env $v ${conn:+CUDA_DEVICE_MAX_CONNECTIONS=$conn} timeout -s KILL 60 /tmp/abort_recovers \
      > "$L/abort_${v// /_}_$conn.log" 2>&1
    echo "exit $?" >> "$L/abort_${v// /_}_$conn.log"
    grep -a "abort_recovers\|exit" "$L/abort_${v// /_}_$conn.log" | tee -a "$S"
  done
done
cat > /tmp/pairs.sh <<'W'
#!/bin/sh
export CCL_HOSTID=emulated-host-$((OMPI_COMM_WORLD_RANK / 2))
exec "$@"
W
chmod +x /tmp/pairs.sh
NCCL_DEBUG=INFO LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 150 mpirun --allow-run-as-root --bind-to none \
  -np 4 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH -x NCCL_DEBUG /tmp/pairs.sh .dev/ccl-perf all_reduce \
  -b 4 -e 64M -f 4 -n 2 -w 1 -c 1 --mem device > "$L/hosts2.txt" 2>&1
echo "two emulated hosts all_reduce rc $?: rows $(grep -cE '^ +[0-9]' "$L/hosts2.txt"), wrong $(grep -E '^ +[0-9]' "$L/hosts2.txt" | awk '{w+=$9; if ($13!="N/A") w+=$13} END {print w+0}')" | tee -a "$S"
grep -a "prefer NICs\|topology" "$L/hosts2.txt" | head -n 8 | tee -a "$S"
cd "$OUT" && tar czf logs.tgz logs && rm -rf logs
