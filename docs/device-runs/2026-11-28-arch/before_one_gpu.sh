#!/usr/bin/env bash
# Before the restructuring (.dev/old, built from the commit in .dev/old/COMMIT), on one H200
# (nvidia-h200; the two-GPU kind was not lent): NVIDIA nccl-tests, nine ops, two ranks under
# mpirun sharing GPU 0. NVIDIA's NCCL cannot put two ranks on one GPU, so libccl alone.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
export NCCL_TESTS_DEVICE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
LIBS="old=.dev/old" NGPU=2 bash tests/gpu/nccl_tests_ab.sh 2>&1 | tail -n 60
cat "$OUT/nccltests/exits.txt"
cd "$OUT" && tar czf logs.tgz nccltests && rm -rf nccltests
