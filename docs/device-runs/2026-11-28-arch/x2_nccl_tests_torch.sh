#!/usr/bin/env bash
# nvidia-h200-x2 (run 2026-11-28, x2-nccltests.md and its logs): NVIDIA nccl-tests nine ops under
# mpirun, NVIDIA NCCL 2.28.9 beside the build before the restructuring (.dev/old) and after it
# (.dev/new) in one call; then the PyTorch check of the new build against NCCL.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
LIBS="nccl old=.dev/old new=.dev/new" NGPU=2 bash tests/gpu/nccl_tests_ab.sh 2>&1 | tail -n 60
NGPU=2; L=$OUT/torch; mkdir -p $L; export CCL_TORCH_OUT=/tmp/torch; mkdir -p $CCL_TORCH_OUT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout -s KILL 150 python3 -m torch.distributed.run --nproc-per-node $NGPU tests/gpu/torch_check.py nccl > $L/torch_nccl.log 2>&1; echo "torch nccl exit $?"
TORCH_NCCL_USE_COMM_NONBLOCKING=1 LD_PRELOAD=$PWD/.dev/new/libnccl.so.2 timeout -s KILL 150 python3 -m torch.distributed.run --nproc-per-node $NGPU tests/gpu/torch_check.py ccl > $L/torch_new.log 2>&1; echo "torch new exit $?"
python3 tests/gpu/torch_compare.py $CCL_TORCH_OUT nccl ccl $NGPU 2>&1 | tail -n 3
cd $OUT && tar czf logs.tgz nccltests torch && rm -rf nccltests torch
