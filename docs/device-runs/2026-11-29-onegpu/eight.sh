#!/usr/bin/env bash
# Eight ranks on one H200 under MPS (libccl only: NVIDIA's NCCL refuses two ranks on one GPU):
# the PyTorch check (tests/gpu/torch_check.py, its own exactness checks) and Megatron-core with
# pipeline parallel 2 x tensor parallel 4 (tests/megatron/run.sh, pp2-tp), once on the default
# paths and once with the low-latency kernels off (CCL_IPC_LL_BYTES=CCL_IPC_LL_EXCHANGE_BYTES=0:
# copy engines at every size), whose losses are then compared.
set -uo pipefail
export OUT=${OUT:-/tmp/out}
MPS=1; source tests/gpu/mps.sh
export CCL_TORCH_ONE_GPU=1 CCL_TORCH_OUT=/tmp/torch8
mkdir -p "$CCL_TORCH_OUT"
LD_PRELOAD=$PWD/.dev/libnccl.so.2 timeout 220 python3 -m torch.distributed.run --nproc-per-node 8 \
  tests/gpu/torch_check.py ccl > "$OUT/torch8.log" 2>&1
echo "exit $?" >> "$OUT/torch8.log"
grep -c " ok$" "$OUT/torch8.log" | sed 's/^/torch_check ok lines: /'
grep -aE "done|FAIL|Error|exit" "$OUT/torch8.log" | head -n 20
MEGATRON_ONE_GPU=1 NPROC=8 CONFIGS=pp2-tp LIBS="ccl ccl-b" \
  CCL_ENV_B="CCL_IPC_LL_BYTES=0 CCL_IPC_LL_EXCHANGE_BYTES=0" ITERS=12 MICRO_BATCH=2 DEADLINE=300 \
  bash tests/megatron/run.sh > "$OUT/meg8.txt" 2>&1
grep -a "megatron" "$OUT/meg8.txt" | tail -n 8
